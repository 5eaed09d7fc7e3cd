"""A picture of the resolved matrix, or of a diff of two overlay sets: a self-contained HTML page
and a PNG (matplotlib, Agg).

    kselect plot                                        # smoke matrix, the default release
    kselect plot matrix=golden overlay=[pr53175] out=plots/pr53175
    kselect plot matrix=seed b.overlay=[pr48666] out=plots/pr48666   # what #48666 changes
    kselect plot a.rules=vllm_0_33_0 b.rules=vllm_0_34_0 out=plots/vllm_0_34_0   # a release upgrade
    kselect plot matrix=seed where.pin=auto where.dtype=bfloat16 b.overlay=[pr48666]

A Hydra app (structured config `kselect_plot`): matrix (a diff: `default`, the matrix `kselect
diff` covers; one overlay set: `smoke`), overlay (one overlay set), a.overlay and b.overlay (a
diff; a.overlay defaults to []), style (a diff: `blocks`, the diff's collapsed rows with
before -> after per group, selector/review/plot_diff.py; `grid`: the cell grid below), out (path without extension, default `kselect-matrix`; writes <out>.png and
<out>.html; an existing file is replaced only with overwrite=true), title, where.<axis>=value or =[v1,v2] (keep only these values of an axis: big
matrices need it).

Layout: one grid per model; rows are platforms, columns KV-cache dtypes (and scales). Inside a
cell, one sub-cell per combination of the other axes (spec-decode, multimodal, dtype, pin),
laid out as the key says; each sub-cell's top half is the sliding-window group, its bottom half
the full-attention group, colored by backend, labelled with the FlashAttention version and the
kv block size. Grey with a cross: invalid (no valid backend / invalid pin). In a diff, changed
sub-cells get a thick black frame, and marks: B = a block size changed, Q = quant-query
changed, S = MTP draft kv scales changed, R = a hardware claim now REFUTED, ! = new warnings; unchanged sub-cells are faded. The HTML page holds the PNG (inline),
the same grids as tables with a tooltip per sub-cell (backends, blocks, warnings, the command
that reproduces it) and the list of changed cells.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from ..base.errors import KSelectError
from ..base.extras import require
from ..base.files import atomic_write, check_out_path
from ..config.compose import CONF_DIR
from ..review.grid import INVALID_COLOR, Grid, cell_marks, color, inner_label, kv_label, target_groups
from ..config.overlay_order import check_overlays
from ..review.mpl import pyplot
from ..review.matrix import AXES, MatrixSpec, expand, load_matrix, resolve_cells
from ..review.plot_html import render_html

__all__ = ["Grid", "build", "filter_spec", "main", "render_html", "render_png"]

# ---------------------------------------------------------------- PNG


def render_png(grid: Grid, title: str) -> bytes:
    plt = pyplot()

    ncols, nrows = len(grid.columns), len(grid.platforms)
    cell_w, cell_h = 0.55 * grid.sub_cols + 0.25, 0.5 * grid.sub_rows + 0.2
    fig_w = max(8.0, 1.2 + ncols * cell_w) * 1.0
    panel_h = 0.9 + nrows * cell_h
    fig_h = 1.6 + panel_h * len(grid.models)
    fig, axes = plt.subplots(len(grid.models), 1, figsize=(fig_w, fig_h), squeeze=False)
    for ax, model in zip(axes[:, 0], grid.models):
        _draw_model(ax, grid, model)
    _draw_legend(fig, grid, title, fig_h)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _draw_model(ax, grid: Grid, model: str) -> None:
    """One model's panel: platforms down, KV-cache columns across, a sub-cell per inner combination."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    ncols, nrows = len(grid.columns), len(grid.platforms)
    ax.set_xlim(0, ncols)
    ax.set_ylim(nrows, 0)
    ax.set_xticks([i + 0.5 for i in range(ncols)])
    ax.set_xticklabels([kv_label(*c) for c in grid.columns], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(nrows)])
    ax.set_yticklabels(grid.platforms, fontsize=10)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_title(model, fontsize=12, fontweight="bold", loc="left", pad=18)
    pad = 0.06
    sw, sh = (1 - 2 * pad) / grid.sub_cols, (1 - 2 * pad) / grid.sub_rows
    for pi, platform in enumerate(grid.platforms):
        for ci, col in enumerate(grid.columns):
            ax.add_patch(Rectangle((ci, pi), 1, 1, fill=False, edgecolor="#444", lw=1.0))
            for k, inner in enumerate(grid.inner or [()]):
                r = grid.get(model, platform, col, inner)
                box = (ci + pad + (k % grid.sub_cols) * sw, pi + pad + (k // grid.sub_cols) * sh, sw, sh)
                if r is None:
                    continue
                _draw_sub_cell(ax, grid, r, box)
                label = "/".join(inner_label(a, v) for a, v in zip(grid.inner_axes, inner))
                if pi == 0 and ci == 0 and grid.inner_axes and len(label) * 0.016 < sw:  # name the sub-cells once
                    ax.text(box[0] + 0.01, box[1] + 0.01, label, ha="left", va="top", fontsize=5.5, color="black", alpha=0.9)
                _draw_change(ax, grid, r, box)


def _draw_sub_cell(ax, grid: Grid, r, box: tuple[float, float, float, float]) -> None:
    """A result's groups stacked in its sub-cell, colored by backend (grey with a cross: invalid)."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    x0, y0, sw, sh = box
    ch = grid.change(r)
    faded = grid.base is not None and (ch is None or not ch.changed)
    alpha = 0.28 if faded else 1.0
    groups = target_groups(r)
    if not groups:
        ax.add_patch(Rectangle((x0, y0), sw, sh, facecolor=INVALID_COLOR, edgecolor="white", hatch="xx", lw=0.5, alpha=alpha))
    for gi, g in enumerate(groups):
        h = sh / len(groups)
        ax.add_patch(Rectangle((x0, y0 + gi * h), sw, h, facecolor=color(g.backend), edgecolor="white", lw=0.5, alpha=alpha))
        label = (f"v{g.flash_attn_version} " if g.flash_attn_version else "") + str(g.kv_block_size)
        ax.text(x0 + sw / 2, y0 + gi * h + h / 2, label, ha="center", va="center", fontsize=6.5,
                color="white" if not faded else "#555")  # fmt: skip


def _draw_change(ax, grid: Grid, r, box: tuple[float, float, float, float]) -> None:
    """A changed sub-cell's frame, and its marks (B, Q, S, R, !)."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    x0, y0, sw, sh = box
    ch = grid.change(r)
    if ch is not None and ch.changed:
        ax.add_patch(Rectangle((x0, y0), sw, sh, fill=False, edgecolor="black", lw=2.0))
    marks = cell_marks(ch, r) if grid.base is None or (ch is not None and ch.changed) else ""
    if marks:
        ax.text(x0 + sw - 0.01, y0 + 0.01, marks, ha="right", va="top", fontsize=6.5, fontweight="bold",
                color="#c00000" if "R" in marks else "black",
                bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none", alpha=0.85))  # fmt: skip


def _draw_legend(fig, grid: Grid, title: str, fig_h: float) -> None:
    from matplotlib.patches import Patch  # noqa: PLC0415

    used = sorted({g.backend for r in grid.results for g in target_groups(r)})
    handles = [Patch(facecolor=color(b), label=b) for b in used] + [Patch(facecolor=INVALID_COLOR, hatch="xx", label="invalid")]
    if grid.base is not None:
        handles.append(Patch(facecolor="white", edgecolor="black", lw=2, label="changed: B block, Q quant-query,\nS kv scales, R refuted claim, ! warning"))
    else:
        handles.append(Patch(facecolor="white", edgecolor="none", label="R refuted claim, ! warning\n(the HTML page lists them)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=8, frameon=False)
    head, _, tail = title.partition(" — ")
    fig.suptitle(head + (f"\n{tail}" if tail else ""), fontsize=11, y=1 - 0.08 / fig_h)
    legend_rows = math.ceil(len(handles) / 3) + 1
    fig.text(0.5, (0.25 + 0.2 * legend_rows) / fig_h, "top half: sliding_window · bottom half: full_attention · label: FA version, kv block\n"
             + grid.inner_key_text(), ha="center", va="bottom", fontsize=7, wrap=True)  # fmt: skip
    fig.tight_layout(rect=(0, (0.75 + 0.2 * legend_rows) / fig_h, 1, 1 - 0.55 / fig_h))


# ---------------------------------------------------------------- HTML


# ---------------------------------------------------------------- CLI


def filter_spec(spec: MatrixSpec, where: dict[str, list]) -> MatrixSpec:
    """Keep only some values of some axes (pins too)."""
    axes = dict(spec.axes)
    pins = dict(spec.pins)
    for axis, vals in where.items():
        if axis not in AXES:
            raise KSelectError(f"plot: where.{axis}: unknown axis; allowed: {list(AXES)}")
        have = spec.values(axis)
        conv = [v for v in have if str(v).lower() in {str(x).lower() for x in vals}]
        unknown = [x for x in vals if str(x).lower() not in {str(v).lower() for v in have}]
        if unknown or not conv:
            raise KSelectError(f"plot: where.{axis}={','.join(map(str, vals))}: {', '.join(map(str, unknown)) or 'nothing'} "
                               f"matches none of the axis values; allowed: {', '.join(map(str, have))}")
        if axis == "pin":
            pins = {k: v for k, v in pins.items() if k in conv}
        else:
            axes[axis] = conv
    return spec.model_copy(update={"axes": axes, "pins": pins})


def build(spec: MatrixSpec, overlays=(), a=None, b=None) -> tuple[Grid, str, str]:
    if b is not None:
        ra = resolve_cells(expand(spec, a or ()), desc="plot: a")
        rb = resolve_cells(expand(spec, b), desc="plot: b")
        grid = Grid(spec, rb, ra)
        n = sum(1 for r in rb if (c := grid.change(r)) is not None and c.changed)
        return grid, f"kselect diff {list(a or ())} → {list(b)} over matrix {spec.name}", f"{n} of {len(rb)} cells changed"
    res = resolve_cells(expand(spec, overlays), desc="plot")
    inv = sum(r.outcome == "invalid" for r in res)
    return Grid(spec, res), f"kselect matrix {spec.name}, overlays {list(overlays)}", f"{len(res)} cells, {inv} invalid"


@dataclass
class PlotSide:
    overlay: Optional[list[str]] = None  # noqa: UP045 - OmegaConf reads the annotation
    rules: Optional[str] = None  # noqa: UP045 - this side's rules option (a release upgrade: a.rules / b.rules)


@dataclass
class Where:
    """Keep only these values of an axis: where.platform=sm90 or where.kv_cache=[fp8,fp8_e4m3]."""

    platform: Any = None
    model: Any = None
    dtype: Any = None
    kv_cache: Any = None
    scales: Any = None
    spec_decode: Any = None
    multimodal: Any = None
    pin: Any = None


@dataclass
class PlotArgs:
    matrix: Optional[str] = None  # noqa: UP045 - default: a diff covers `default` (as kselect diff), a matrix `smoke`
    style: str = "blocks"  # a diff: blocks (the diff's collapsed rows) | grid (one sub-cell per cell)
    overlay: list[str] = field(default_factory=list)  # the matrix picture's overlay set
    a: PlotSide = field(default_factory=lambda: PlotSide(overlay=[]))
    b: PlotSide = field(default_factory=PlotSide)  # b.overlay given: a diff, b drawn, changes against a marked
    out: str = "kselect-matrix"
    overwrite: bool = False  # true: replace an existing <out>.png / <out>.html (else exit 2 naming it)
    title: str = ""
    where: Where = field(default_factory=Where)


ConfigStore.instance().store(name="kselect_plot", node=PlotArgs)
RENAMED = {
    "overlays": "write overlay=[pr48666,...]",
    "a": "write a.overlay=[...] (and b.overlay=[...] for the other side of the diff)",
    "b": "write b.overlay=[...] (a.overlay defaults to [])",
}


def task(cfg) -> int:
    where = {}
    for axis, v in cfg.where.items():
        if v is not None:
            vals = list(v) if not isinstance(v, (str, int, float, bool)) else [v]
            where[axis] = [str(x).lower() if isinstance(x, bool) else str(x) for x in vals]
    diff = cfg.b.overlay is not None or cfg.b.rules is not None
    if not diff and (cfg.a.overlay or cfg.a.rules):
        raise KSelectError("plot: a.overlay / a.rules set one side of a diff, but no b side was given, so they would be "
                           "ignored; allowed: b.overlay=[...] or b.rules=<name> with them (a diff), or overlay=[...] "
                           "(one overlay set's picture)")
    if diff and cfg.overlay:
        raise KSelectError("plot: overlay=[...] is one overlay set's picture and a diff ignores it; allowed with "
                           "b.overlay / b.rules: a.overlay=[...] for the a side")
    for key, names in (("overlay", cfg.overlay), ("a.overlay", cfg.a.overlay), ("b.overlay", cfg.b.overlay)):
        check_overlays(f"plot: {key}", names or (), CONF_DIR)
    if Path(cfg.out).is_dir() or Path(cfg.out).with_suffix(".png").is_dir():
        raise KSelectError(f"plot: out={cfg.out!r} is a directory; allowed: a file path without suffix (.png and .html are added)")
    if cfg.style not in ("blocks", "grid"):
        raise KSelectError(f"plot: style={cfg.style!r}; allowed: blocks, grid")
    for suffix in (".png", ".html"):
        check_out_path(Path(cfg.out).with_suffix(suffix), "out")
        if Path(cfg.out).with_suffix(suffix).exists() and not cfg.overwrite:
            raise KSelectError(f"plot: out={cfg.out!r}: {Path(cfg.out).with_suffix(suffix)} exists; allowed: another "
                               "out= path, or overwrite=true to replace it")
    require("matplotlib", "matplotlib", "kselect plot")  # before the matrix is resolved: the picture needs it
    spec = filter_spec(load_matrix(cfg.matrix or ("default" if diff else "smoke")), where)
    if diff and cfg.style == "blocks":
        from ..review.diff import diff_overlays  # noqa: PLC0415
        from ..review.plot_diff import picture  # noqa: PLC0415

        a, b = tuple(cfg.a.overlay or ()), tuple(cfg.b.overlay if cfg.b.overlay is not None else (cfg.a.overlay or ()))
        d = diff_overlays(a, b, spec, rules_a=cfg.a.rules, rules_b=cfg.b.rules)
        s = d.summary()
        title = cfg.title or f"kselect diff {d.a_label} → {d.b_label} over matrix {spec.name}"
        summary = (f"{s['cells']} cells: {s['changed']} changed ({s['selection_changed']} selection, "
                   f"{s['became_invalid']} became invalid, {s['new_warnings']} with new warnings), {len(d.blocks)} blocks")
        if where:
            summary += " (where " + ", ".join(f"{k}={'|'.join(v)}" for k, v in where.items()) + ")"
        png, page = picture(d, title, summary)
        return _write(Path(cfg.out), png, page, summary)
    if diff and (cfg.a.rules or cfg.b.rules):
        raise KSelectError("plot: a.rules / b.rules draw with style=blocks (the diff's rows); allowed: style=blocks")
    if diff:
        grid, title, summary = build(spec, a=tuple(cfg.a.overlay or ()), b=tuple(cfg.b.overlay))
    else:
        grid, title, summary = build(spec, tuple(cfg.overlay))
    title = cfg.title or title
    if where:
        summary += " (where " + ", ".join(f"{k}={'|'.join(v)}" for k, v in where.items()) + ")"
    png = render_png(grid, f"{title} — {summary}")
    return _write(Path(cfg.out), png, render_html(grid, title, png, summary), summary)


def _write(out: Path, png: bytes, page: str, summary: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out.with_suffix(".png"), png)
    atomic_write(out.with_suffix(".html"), page)
    print(f"wrote {out.with_suffix('.png')} and {out.with_suffix('.html')} ({summary})")
    return 0
