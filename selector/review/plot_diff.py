"""The picture of a matrix diff: the same blocks `kselect diff` prints (cells that changed alike,
collapsed along the matrix axes), one row each, so any matrix size gives a picture of the same
few dozen rows.

Each row: before -> after per layer group as backend-colored chips (a group whose backend
changed gets a thick arrow and a black frame: backend changes show at a glance; a group that
kept its backend is faded), a bar with the number of cells, where (the collapsed pattern), and
the first other change (blocks, quant-query, a new warning). Rows come in the diff's order:
cells that became invalid and new warnings first. The HTML page holds the PNG inline and the
same rows as a table, every pattern and detail listed, and no links out.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from ..base import texts
from ..review.diff import Block, MatrixDiff
from ..review.diff_render import detail, rule_change
from ..review.matrix import CellResult
from ..review.mpl import pyplot
from ..config.vocab import kernel_label
from ..export.render import group_name
from ..review.grid import BACKEND_COLORS, INVALID, VERSION_COLORS, color

MAX_ROWS = 48  # a picture of more rows stops being read; the HTML table lists every block
# the chips name FlashAttention versions: the legend shows FA3 (the backend's color) and FA4 (its own shade)
LEGEND = [kernel_label("FLASH_ATTN", 3), *VERSION_COLORS, *(b for b in BACKEND_COLORS if b != "FLASH_ATTN")]


def backends(r: CellResult) -> dict[str, str]:
    """group -> "BACKEND[ vN]" of the target groups; {"all": invalid} for an invalid cell."""
    if r.selection is None:
        return {}
    return {group_name(g): g.label
            for g in r.selection.groups if not g.draft}


def row_groups(b: Block) -> list[tuple[str, str, str]]:
    """(group, before, after) for the block's example cell; an invalid side reads "invalid"."""
    ex = b.example
    if ex is None:
        return []
    ba, bb = backends(ex.a), backends(ex.b)
    names = list(dict.fromkeys([*ba, *bb])) or ["all groups"]
    return [(n, ba.get(n, INVALID), bb.get(n, INVALID)) for n in names]


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _kind(b: Block) -> str:
    return texts.DIFF_KIND.get(b.kind, b.kind)


def _warn(b: Block) -> bool:
    return b.kind in ("became_invalid", "new_warning")


def _row_note(b: Block) -> str:
    if b.kind == "selection":
        return detail(b.details[0][0]) if b.details else ""
    return f"{_kind(b)}: {b.title}"


def render_png(d: MatrixDiff, title: str) -> bytes:
    plt = pyplot()
    from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: PLC0415

    blocks = d.blocks[:MAX_ROWS]
    n = max(1, len(blocks))
    row_h, fig_w = 0.42, 15.0
    fig_h = 0.7 + row_h * (n + 1)
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0.005, 0.01, 0.99, 1 - 0.01 - 0.4 / fig_h))
    ax.set_xlim(0, 100)
    ax.set_ylim(n + 0.6, -0.8)
    ax.axis("off")
    fig.suptitle(title, fontsize=11, x=0.01, ha="left", y=0.995, va="top")
    most = max((len(b.cells) for b in blocks), default=1)
    for x, head in ((0.5, "before → after, per layer group"), (36, "cells"), (47, "where"), (74, "also")):
        ax.text(x, -0.45, head, fontsize=8.5, fontweight="bold", va="center")
    if not blocks:
        ax.text(0.5, 0.5, "no cell changed", fontsize=11, va="center")
    kind = None
    for i, b in enumerate(blocks):
        y = i + 0.5
        if b.kind != kind:
            kind = b.kind
            ax.axhline(i + 0.02, color="#444444", lw=0.6)
            ax.text(99.5, i + 0.12, _kind(b), fontsize=7, ha="right", va="top", color="#444444", style="italic")
        groups = row_groups(b)
        h = 0.8 / max(1, len(groups))
        for gi, (g, before, after) in enumerate(groups):
            y0 = i + 0.1 + gi * h
            changed = before != after
            for x0, backend in ((0.5, before), (19, after)):
                ax.add_patch(Rectangle((x0, y0), 14, h * 0.9, facecolor=color(backend), alpha=1.0 if changed else 0.35,
                                       edgecolor="black" if changed else "white", lw=1.6 if changed else 0.5))
                ax.text(x0 + 7, y0 + h * 0.45, _short(f"{g[:4]} {backend}", 24), fontsize=6.5, ha="center",
                        va="center", color="black")
            ax.add_patch(FancyArrowPatch((14.8, y0 + h * 0.45), (18.7, y0 + h * 0.45), arrowstyle="-|>",
                                         mutation_scale=9 if changed else 5, lw=2.0 if changed else 0.6,
                                         color="black" if changed else "#999999"))
        ax.add_patch(Rectangle((36, i + 0.25), 7 * len(b.cells) / most, 0.5, facecolor="#555555"))
        ax.text(36 + 7 * len(b.cells) / most + 0.4, y, str(len(b.cells)), fontsize=7.5, va="center")
        more = f"  (+{len(b.patterns) - 1} more)" if len(b.patterns) > 1 else ""
        ax.text(47, y, _short(b.patterns[0] if b.patterns else "", 60) + more, fontsize=7, va="center", family="monospace")
        ax.text(74, y, _short(_row_note(b), 62), fontsize=7, va="center",
                color="#b30000" if _warn(b) else "black")
    if len(d.blocks) > MAX_ROWS:
        ax.text(0.5, n + 0.35, f"… {len(d.blocks) - MAX_ROWS} more blocks: the HTML table and `kselect diff` list them",
                fontsize=8, va="center")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _chip(backend: str, changed: bool) -> str:
    style = f"background:{color(backend)};opacity:{1 if changed else 0.45}"
    return f"<span class='chip{' ch' if changed else ''}' style='{style}'>{html.escape(backend)}</span>"


def render_html(d: MatrixDiff, title: str, png: bytes, summary: str) -> str:
    rows = []
    for b in d.blocks:
        groups = "<br>".join(
            f"{html.escape(g)}: {_chip(x, x != y)} <b>{'→' if x != y else '='}</b> {_chip(y, x != y)}"
            for g, x, y in row_groups(b))
        pats = "<br>".join(f"<code>{html.escape(p)}</code>" for p in b.patterns)
        det = "<br>".join(html.escape(detail(c) + (f"  [{w}]" if w else "")) for c, w in b.details)
        rules = "<br>".join(f"<code>{html.escape(rule_change(r))}</code>" for r in b.rules)
        warn = " class='warn'" if _warn(b) else ""
        rows.append(f"<tr{warn}><td>{html.escape(_kind(b))}</td><td>{groups}</td><td class='n'>{len(b.cells)}</td>"
                    f"<td>{pats}</td><td>{html.escape(b.title) if b.kind != 'selection' else ''}"
                    f"{'<br>' if det and b.kind != 'selection' else ''}{det}</td><td>{rules}</td></tr>")
    legend = " ".join(_chip(k, True) for k in LEGEND) + " " + _chip(INVALID, True)
    body = "\n".join(rows) or "<tr><td colspan='6'>no cell changed</td></tr>"
    return f"""<!doctype html>
<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; }}
td.n {{ text-align: right; }}
tr.warn td:first-child {{ color: #b30000; font-weight: bold; }}
.chip {{ display: inline-block; padding: 1px 5px; border-radius: 3px; font-size: 12px; border: 2px solid transparent; }}
.chip.ch {{ border-color: black; }}
code {{ font-size: 12px; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p id='summary'>{html.escape(summary)}</p>
<p>Backends: {legend}. A framed chip and an arrow: that group's backend changed; faded: it did not.</p>
<img alt='diff picture' src='data:image/png;base64,{base64.b64encode(png).decode()}'>
<h2>Every block</h2>
<table id='blocks'><tr><th>kind</th><th>before → after</th><th>cells</th><th>where</th><th>changes</th><th>rules</th></tr>
{body}
</table></body></html>
"""


def picture(d: MatrixDiff, title: str, summary: str) -> tuple[bytes, str]:
    png = render_png(d, f"{title} — {summary}")
    return png, render_html(d, title, png, summary)


__all__: Sequence[str] = ("picture", "render_html", "render_png", "row_groups")
