"""A picture of the resolved matrix, or of a diff of two overlay sets: a self-contained HTML page
and a PNG (matplotlib, Agg).

    kselect plot                                        # smoke matrix, base rules
    kselect plot matrix=golden overlays=[pr53175] out=plots/pr53175
    kselect plot a='[]' b='[pr48666]' out=plots/pr48666   # what #48666 changes
    kselect plot matrix=default where.pin=auto where.dtype=bfloat16 a='[]' b='[pr48666]'

Arguments (key=value): matrix (default smoke), overlays (one overlay set), a and b (a diff: b is
drawn, changes against a are marked), out (path without extension, default
`kselect-matrix`; writes <out>.png and <out>.html), title, where.<axis>=v1,v2 (keep only these
values of an axis: big matrices need it).

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

import base64
import html
import io
import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from . import texts
from .cli import run_cli
from .diff import diff_cell
from .diff_render import change_line, warning_line
from .errors import KSelectError
from .matrix import AXES, CellResult, MatrixSpec, cli_args, expand, load_matrix, parse_overlays, resolve_cells
from .vocab import GROUP_KINDS

BACKEND_COLORS = {
    "FLASH_ATTN": "#1f77b4",
    "FLASHINFER": "#2ca02c",
    "TRITON_ATTN": "#ff7f0e",
    "FLEX_ATTENTION": "#9467bd",
    "TORCH_REFERENCE": "#8c564b",
    "TURBOQUANT": "#e377c2",
}
INVALID_COLOR = "#bdbdbd"
INNER_AXES = ("spec_decode", "multimodal", "dtype", "pin")


def _color(backend: str) -> str:
    return BACKEND_COLORS.get(backend, "#7f7f7f")


def _kv_label(kv, scales) -> str:
    return f"{kv}" + (" calib" if scales == "calibrated" else "")


def _inner_label(axis: str, v) -> str:
    if axis == "multimodal":
        return "mm" if v else "text"
    if axis == "spec_decode":
        return "mtp" if v == "mtp" else "no-spec"
    return str(v)


class Grid:
    """Cells arranged for drawing: model -> platform x (kv, scales) -> inner combination."""

    def __init__(self, spec: MatrixSpec, results: Sequence[CellResult], base: Sequence[CellResult] | None = None):
        self.spec = spec
        self.results = list(results)
        self.base = {r.cell.env_id: r for r in base} if base is not None else None
        cells = [r.cell for r in self.results]
        self.models = _ordered(spec.values("model"), {c.model for c in cells})
        self.platforms = _ordered(spec.values("platform"), {c.platform for c in cells})
        kvs = [(k, s) for k in spec.values("kv_cache") for s in spec.values("scales")]
        self.columns = [ks for ks in kvs if any((c.kv_cache, c.scales) == ks for c in cells)]
        self.inner_axes = [a for a in INNER_AXES if len({c.axis(a) for c in cells}) > 1]
        self.inner_values = [_ordered(spec.values(a), {c.axis(a) for c in cells}) for a in self.inner_axes]
        self.inner = list(itertools.product(*self.inner_values))
        # sub-cell columns are the trailing inner axes, rows the leading ones (aligned with the axes),
        # split where the sub-grid is closest to 1.5 times wider than tall
        sizes = [len(v) for v in self.inner_values]
        best = (float("inf"), 0)
        for j in range(len(sizes) + 1):
            cols, rows = math.prod(sizes[j:]), math.prod(sizes[:j])
            best = min(best, (abs(cols / rows - 1.5), j))
        self.split = best[1]
        self.sub_cols = max(1, math.prod(sizes[self.split :]))
        self.sub_rows = max(1, math.prod(sizes[: self.split]))
        self.by_key = {(r.cell.model, r.cell.platform, (r.cell.kv_cache, r.cell.scales), tuple(r.cell.axis(a) for a in self.inner_axes)): r for r in self.results}

    def get(self, model, platform, col, inner) -> CellResult | None:
        return self.by_key.get((model, platform, col, inner))

    def change(self, r: CellResult):
        if self.base is None:
            return None
        a = self.base.get(r.cell.env_id)
        return diff_cell(a, r) if a is not None else None

    def inner_key_text(self) -> str:
        if not self.inner_axes:
            return "one sub-cell per cell"

        def part(axes, values):
            if not axes:
                return "-"
            combos = itertools.product(*values)
            return f"{' × '.join(axes)} ({', '.join('/'.join(_inner_label(a, v) for a, v in zip(axes, c)) for c in combos)})"

        cols = part(self.inner_axes[self.split :], self.inner_values[self.split :])
        rows = part(self.inner_axes[: self.split], self.inner_values[: self.split])
        return f"sub-cell columns: {cols}; sub-cell rows: {rows}"


def _ordered(values: Sequence, present: set) -> list:
    return [v for v in values if v in present]


def must_see(r: CellResult) -> list:
    """Warnings a reviewer must see: every rule/resolve warning and refuted hardware claims
    (unverified claims are counted, not listed: nearly every cell has some until GPUs are measured)."""
    return [w for w in r.warnings if w.code != "claims_unverified"]


BLOCK_FIELDS = {"kernel_block", "kv_block", "cache_block"}


def _marks(ch, r: CellResult | None = None) -> str:
    if ch is None:  # not a diff: flag the cells with warnings a reviewer must see
        if r is None:
            return ""
        seen = must_see(r)
        return ("R" if any(w.code == "claims_refuted" for w in seen) else "") + ("!" if any(w.code != "claims_refuted" for w in seen) else "")
    if not ch.changed:
        return ""
    fields = ch.fields
    m = ""
    if fields & BLOCK_FIELDS:
        m += "B"
    if "quant_query" in fields:
        m += "Q"
    if "kv_scales" in fields:
        m += "S"
    if any(w.code == "claims_refuted" for w in ch.warnings_added):
        m += "R"
    if any(w.code != "claims_refuted" for w in ch.warnings_added):
        m += "!"
    if ch.outcome:
        m += "X" if ch.outcome == "became_invalid" else "V"
    return m


def _change_text(ch, warnings: bool = False) -> str:
    parts = ((texts.DIFF_KIND[ch.outcome],) if ch.outcome else ()) + tuple(change_line(x) for x in ch.backend + ch.lines)
    if warnings:
        parts += tuple(f"+warning {warning_line(w)}" for w in ch.warnings_added)
    return "; ".join(parts)


def _target_groups(r: CellResult):
    if r.selection is None:
        return []
    gs = [g for g in r.selection.groups if not g.draft]
    order = {k: i for i, k in enumerate(GROUP_KINDS)}
    return sorted(gs, key=lambda g: order.get(g.kind, 2))


# ---------------------------------------------------------------- PNG


def render_png(grid: Grid, title: str) -> bytes:
    import matplotlib  # noqa: PLC0415 - only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415

    ncols, nrows = len(grid.columns), len(grid.platforms)
    cell_w, cell_h = 0.55 * grid.sub_cols + 0.25, 0.5 * grid.sub_rows + 0.2
    fig_w = max(8.0, 1.2 + ncols * cell_w) * 1.0
    panel_h = 0.9 + nrows * cell_h
    fig_h = 1.6 + panel_h * len(grid.models)
    fig, axes = plt.subplots(len(grid.models), 1, figsize=(fig_w, fig_h), squeeze=False)
    for ax, model in zip(axes[:, 0], grid.models):
        ax.set_xlim(0, ncols)
        ax.set_ylim(nrows, 0)
        ax.set_xticks([i + 0.5 for i in range(ncols)])
        ax.set_xticklabels([_kv_label(*c) for c in grid.columns], fontsize=9)
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
                    x0 = ci + pad + (k % grid.sub_cols) * sw
                    y0 = pi + pad + (k // grid.sub_cols) * sh
                    if r is None:
                        continue
                    ch = grid.change(r)
                    faded = grid.base is not None and (ch is None or not ch.changed)
                    alpha = 0.28 if faded else 1.0
                    groups = _target_groups(r)
                    if not groups:
                        ax.add_patch(Rectangle((x0, y0), sw, sh, facecolor=INVALID_COLOR, edgecolor="white", hatch="xx", lw=0.5, alpha=alpha))
                    for gi, g in enumerate(groups):
                        h = sh / len(groups)
                        ax.add_patch(Rectangle((x0, y0 + gi * h), sw, h, facecolor=_color(g.backend), edgecolor="white", lw=0.5, alpha=alpha))
                        label = (f"v{g.flash_attn_version} " if g.flash_attn_version else "") + str(g.kv_block_size)
                        ax.text(x0 + sw / 2, y0 + gi * h + h / 2, label, ha="center", va="center", fontsize=6.5,
                                color="white" if not faded else "#555")  # fmt: skip
                    label = "/".join(_inner_label(a, v) for a, v in zip(grid.inner_axes, inner))
                    if pi == 0 and ci == 0 and grid.inner_axes and len(label) * 0.016 < sw:  # name the sub-cells once
                        ax.text(x0 + 0.01, y0 + 0.01, label, ha="left", va="top", fontsize=5.5, color="black", alpha=0.9)
                    if ch is not None and ch.changed:
                        ax.add_patch(Rectangle((x0, y0), sw, sh, fill=False, edgecolor="black", lw=2.0))
                    marks = _marks(ch, r) if grid.base is None or (ch is not None and ch.changed) else ""
                    if marks:
                        ax.text(x0 + sw - 0.01, y0 + 0.01, marks, ha="right", va="top", fontsize=6.5, fontweight="bold",
                                color="#c00000" if "R" in marks else "black",
                                bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none", alpha=0.85))  # fmt: skip
    used = sorted({g.backend for r in grid.results for g in _target_groups(r)})
    handles = [Patch(facecolor=_color(b), label=b) for b in used] + [Patch(facecolor=INVALID_COLOR, hatch="xx", label="invalid")]
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


# ---------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table.grid{border-collapse:collapse;margin-bottom:1.5em}
table.grid th{font-weight:600;padding:4px 8px;background:#f3f3f3}
table.grid td{border:1px solid #999;padding:3px;vertical-align:top}
table.sub{border-collapse:separate;border-spacing:2px}
table.sub td{border:none;padding:0}
.sc{width:46px;font-size:10px;color:#fff;text-align:center;line-height:14px}
.sc div{height:14px}
.faded{opacity:.3}
.changed{outline:3px solid #000}
.inv{background:repeating-linear-gradient(45deg,#bbb,#bbb 3px,#ddd 3px,#ddd 6px);height:28px;color:#333}
.mk{color:#000;font-weight:700;background:#fff;font-size:9px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;color:#fff;font-size:12px}
pre{background:#f6f6f6;padding:8px;overflow-x:auto}
"""


def _tooltip(r: CellResult, ch) -> str:
    lines = [r.cell.id, r.cell.command()]
    if r.selection is None:
        lines.append(f"INVALID: {r.error}")
    else:
        lines.append(f"cache block {r.selection.block_size}")
        for g in r.selection.groups:
            name = texts.group_label(g.id)
            v = f" v{g.flash_attn_version}" if g.flash_attn_version else ""
            lines.append(f"{name}: {g.backend}{v} kernel {g.kernel_block_size} kv {g.kv_block_size} quant_query {g.quant_query} {g.descale} scales {g.kv_scales}")
        lines += [f"WARNING {texts.group_label(w.group)}: {w.text}" for w in r.warnings]
    if ch is not None and ch.changed:
        lines.append("CHANGED: " + _change_text(ch))
        lines += [f"NEW WARNING {warning_line(w)}" for w in ch.warnings_added]
    return html.escape("\n".join(lines), quote=True)


def render_html(grid: Grid, title: str, png: bytes, summary: str = "") -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
    out.append(f"<h1>{html.escape(title)}</h1>")
    if summary:
        out.append(f"<p>{html.escape(summary)}</p>")
    used = sorted({g.backend for r in grid.results for g in _target_groups(r)})
    out.append("<p class='legend'>" + "".join(f"<span style='background:{_color(b)}'>{b}</span>" for b in used)
               + "<span style='background:#999'>invalid</span></p>")  # fmt: skip
    out.append(f"<p>Each sub-cell: top sliding_window, bottom full_attention (FA version, kv block). {html.escape(grid.inner_key_text())}. "
               "Hover a sub-cell for its selection, warnings and command.</p>")  # fmt: skip
    out.append(f"<img alt='matrix' src='data:image/png;base64,{base64.b64encode(png).decode()}' style='max-width:100%'>")
    for model in grid.models:
        out.append(f"<h2>{html.escape(model)}</h2><table class='grid'><tr><th></th>")
        out += [f"<th>{html.escape(_kv_label(*c))}</th>" for c in grid.columns]
        out.append("</tr>")
        for platform in grid.platforms:
            out.append(f"<tr><th>{html.escape(platform)}</th>")
            for col in grid.columns:
                out.append("<td><table class='sub'>")
                for row in range(grid.sub_rows):
                    out.append("<tr>")
                    for k in range(row * grid.sub_cols, min((row + 1) * grid.sub_cols, max(1, len(grid.inner)))):
                        r = grid.get(model, platform, col, (grid.inner or [()])[k])
                        out.append(_sub_html(grid, r))
                    out.append("</tr>")
                out.append("</table></td>")
            out.append("</tr>")
        out.append("</table>")
    warned = [(r, w) for r in grid.results for w in must_see(r)]
    out.append(f"<h2>Warnings ({len(warned)})</h2><ul>")
    out += [f"<li><code>{html.escape(r.cell.id)}</code> {html.escape(texts.group_label(w.group))}: {html.escape(w.text)}</li>"
            for r, w in warned[:400]]  # fmt: skip
    if len(warned) > 400:
        out.append(f"<li>… {len(warned) - 400} more</li>")
    unverified = sum(any(w.code == "claims_unverified" for w in r.warnings) for r in grid.results)
    out.append(f"</ul><p>{unverified} of {len(grid.results)} cells rely on hardware claims not yet verified on their GPU "
               "(<code>[conformance]</code>; hover a sub-cell for the claims).</p>")  # fmt: skip
    if grid.base is not None:
        changed = [(r, grid.change(r)) for r in grid.results]
        changed = [(r, c) for r, c in changed if c is not None and c.changed]
        out.append(f"<h2>Changed cells ({len(changed)})</h2><pre>")
        for r, c in changed[:1000]:
            out.append(html.escape(f"{r.cell.id}: {_change_text(c, warnings=True)}"))
        out.append("</pre>")
    out.append("</body></html>")
    return "\n".join(out)


def _sub_html(grid: Grid, r: CellResult | None) -> str:
    if r is None:
        return "<td></td>"
    ch = grid.change(r)
    cls = ["sc"]
    if grid.base is not None and (ch is None or not ch.changed):
        cls.append("faded")
    if ch is not None and ch.changed:
        cls.append("changed")
    marks = _marks(ch, r) if grid.base is None or (ch is not None and ch.changed) else ""
    inner = "" if not marks else f"<div class='mk'>{html.escape(marks)}</div>"
    groups = _target_groups(r)
    if not groups:
        inner += "<div class='inv'>X</div>"
    for g in groups:
        label = (f"v{g.flash_attn_version} " if g.flash_attn_version else "") + str(g.kv_block_size)
        inner += f"<div style='background:{_color(g.backend)}'>{html.escape(label)}</div>"
    return f"<td><div class='{' '.join(cls)}' title=\"{_tooltip(r, ch)}\">{inner}</div></td>"


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
        if not conv:
            raise KSelectError(f"plot: where.{axis}={','.join(map(str, vals))} matches none of {have}")
        if axis == "pin":
            pins = {k: v for k, v in pins.items() if k in conv}
        else:
            axes[axis] = conv
    return spec.model_copy(update={"axes": axes, "pins": pins})


def build(spec: MatrixSpec, overlays=(), a=None, b=None) -> tuple[Grid, str, str]:
    if b is not None:
        ra = resolve_cells(expand(spec, a or ()))
        rb = resolve_cells(expand(spec, b))
        grid = Grid(spec, rb, ra)
        n = sum(1 for r in rb if (c := grid.change(r)) is not None and c.changed)
        return grid, f"kselect diff {list(a or ())} → {list(b)} over matrix {spec.name}", f"{n} of {len(rb)} cells changed"
    res = resolve_cells(expand(spec, overlays))
    inv = sum(r.outcome == "invalid" for r in res)
    return Grid(spec, res), f"kselect matrix {spec.name}, overlays {list(overlays)}", f"{len(res)} cells, {inv} invalid"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    where = {}
    rest = []
    for x in argv:
        if x.startswith("where."):
            k, _, v = x[6:].partition("=")
            where[k] = [s.strip() for s in v.split(",") if s.strip()]
        else:
            rest.append(x)
    args = cli_args(rest, {"matrix": "smoke", "overlays": "[]", "a": "", "b": "", "out": "kselect-matrix", "title": ""}, "kselect plot")
    spec = filter_spec(load_matrix(args["matrix"]), where)
    if bool(args["a"]) != bool(args["b"]):
        raise KSelectError("plot: a diff needs both a=... and b=...")
    if args["b"]:
        grid, title, summary = build(spec, a=parse_overlays(args["a"]), b=parse_overlays(args["b"]))
    else:
        grid, title, summary = build(spec, parse_overlays(args["overlays"]))
    title = args["title"] or title
    if where:
        summary += " (where " + ", ".join(f"{k}={'|'.join(v)}" for k, v in where.items()) + ")"
    png = render_png(grid, f"{title} — {summary}")
    out = Path(args["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".png").write_bytes(png)
    out.with_suffix(".html").write_text(render_html(grid, title, png, summary))
    print(f"wrote {out.with_suffix('.png')} and {out.with_suffix('.html')} ({summary})")
    return 0


if __name__ == "__main__":
    run_cli(main)
