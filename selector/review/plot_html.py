"""The plot's self-contained HTML page: the PNG inline, the grids as tables with a tooltip per
sub-cell, the warnings a reviewer must see, and the changed cells."""

from __future__ import annotations

import base64
import html

from ..base import texts
from ..review.diff_render import warning_line
from ..review.grid import Grid, cell_marks, change_text, color, kv_label, must_see, target_groups
from ..review.matrix import CellResult

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
            lines.append(f"{name}: {g.label} kernel {g.kernel_block_size} kv {g.kv_block_size} quant_query {g.quant_query} {g.descale} scales {g.kv_scales}")
        lines += [f"WARNING {texts.group_label(w.group)}: {w.text}" for w in r.warnings]
    if ch is not None and ch.changed:
        lines.append("CHANGED: " + change_text(ch))
        lines += [f"NEW WARNING {warning_line(w)}" for w in ch.warnings_added]
    return html.escape("\n".join(lines), quote=True)


def render_html(grid: Grid, title: str, png: bytes, summary: str = "") -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
    out.append(f"<h1>{html.escape(title)}</h1>")
    if summary:
        out.append(f"<p>{html.escape(summary)}</p>")
    used = sorted({g.backend for r in grid.results for g in target_groups(r)})
    out.append("<p class='legend'>" + "".join(f"<span style='background:{color(b)}'>{b}</span>" for b in used)
               + "<span style='background:#999'>invalid</span></p>")  # fmt: skip
    out.append(f"<p>Each sub-cell: top sliding_window, bottom full_attention (FA version, kv block). {html.escape(grid.inner_key_text())}. "
               "Hover a sub-cell for its selection, warnings and command.</p>")  # fmt: skip
    out.append(f"<img alt='matrix' src='data:image/png;base64,{base64.b64encode(png).decode()}' style='max-width:100%'>")
    for model in grid.models:
        out.append(f"<h2>{html.escape(model)}</h2><table class='grid'><tr><th></th>")
        out += [f"<th>{html.escape(kv_label(*c))}</th>" for c in grid.columns]
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
            out.append(html.escape(f"{r.cell.id}: {change_text(c, warnings=True)}"))
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
    marks = cell_marks(ch, r) if grid.base is None or (ch is not None and ch.changed) else ""
    inner = "" if not marks else f"<div class='mk'>{html.escape(marks)}</div>"
    groups = target_groups(r)
    if not groups:
        inner += "<div class='inv'>X</div>"
    for g in groups:
        label = (f"v{g.flash_attn_version} " if g.flash_attn_version else "") + str(g.kv_block_size)
        inner += f"<div style='background:{color(g.backend)}'>{html.escape(label)}</div>"
    return f"<td><div class='{' '.join(cls)}' title=\"{_tooltip(r, ch)}\">{inner}</div></td>"
