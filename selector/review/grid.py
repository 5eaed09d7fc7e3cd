"""The matrix arranged for drawing (model -> platform × KV column -> inner sub-cells), and what a
sub-cell is marked with; read from records and typed diff changes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..base import texts
from ..review.diff import diff_cell
from ..review.diff_render import change_line, warning_line
from ..review.matrix import CellResult, MatrixSpec
from ..config.vocab import GROUP_KINDS, kernel_label, parse_kernel_label

# Every picture's palette: a color per backend; where a picture names FlashAttention versions (a diff's
# chips), FlashAttention 4 takes its own shade.
BACKEND_COLORS = {
    "FLASH_ATTN": "#1f77b4",
    "FLASHINFER": "#2ca02c",
    "TRITON_ATTN": "#ff7f0e",
    "FLEX_ATTENTION": "#9467bd",
    "TORCH_REFERENCE": "#8c564b",
    "TURBOQUANT": "#e377c2",
}
VERSION_COLORS = {kernel_label("FLASH_ATTN", 4): "#6baed6"}
INVALID = "invalid"  # a cell no backend serves
INVALID_COLOR = "#bdbdbd"
UNKNOWN_COLOR = "#7f7f7f"
INNER_AXES = ("spec_decode", "multimodal", "dtype", "pin")


def color(label: str) -> str:
    """The color of a backend or a kernel label (`FLASH_ATTN v4`, `FLASH_ATTN v3+upstream`), or of INVALID."""
    if label == INVALID:
        return INVALID_COLOR
    backend, version, _ = parse_kernel_label(label)
    return VERSION_COLORS.get(kernel_label(backend, version)) or BACKEND_COLORS.get(backend, UNKNOWN_COLOR)


def kv_label(kv, scales) -> str:
    return f"{kv}" + (" calib" if scales == "calibrated" else "")


def inner_label(axis: str, v) -> str:
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
            return f"{' × '.join(axes)} ({', '.join('/'.join(inner_label(a, v) for a, v in zip(axes, c)) for c in combos)})"

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


def cell_marks(ch, r: CellResult | None = None) -> str:
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


def change_text(ch, warnings: bool = False) -> str:
    parts = ((texts.DIFF_KIND[ch.outcome],) if ch.outcome else ()) + tuple(change_line(x) for x in ch.backend + ch.lines)
    if warnings:
        parts += tuple(f"+warning {warning_line(w)}" for w in ch.warnings_added)
    return "; ".join(parts)


def target_groups(r: CellResult):
    if r.selection is None:
        return []
    gs = [g for g in r.selection.groups if not g.draft]
    order = {k: i for i, k in enumerate(GROUP_KINDS)}
    return sorted(gs, key=lambda g: order.get(g.kind, 2))
