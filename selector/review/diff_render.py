"""A matrix diff as a terminal table, Markdown (for a PR comment) or JSON. Text comes from
`texts.py`; the diff itself (`diff.py`) holds typed changes only."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..base import texts
from ..outputs import notes
from ..review.diff_records import PREFILL_AS_DECODE

# ---------------------------------------------------------------- pieces


def change_line(line) -> str:
    """A diff.ChangeLine as text: `all groups: quant_query true -> false, descale q_k_v -> kv_dequant`."""
    if line.event:
        return f"{texts.group_label(line.groups[0])}: {texts.GROUP_EVENT[line.event]}"
    parts = ", ".join(f"{c.a} -> {c.b}" if c.field == "backend" else
                      f"{texts.FIELD_LABEL[c.field]} {_value(c.field, c.a)} -> {_value(c.field, c.b)}" for c in line.changes)
    if not line.groups:
        return parts
    who = ", ".join(texts.ALL_GROUPS_LABEL if g == "*" else texts.group_label(g) for g in line.groups)
    return f"{who}: {parts}"


def _value(fld: str, v: str) -> str:
    return texts.PREFILL_AS_DECODE if fld == "prefill_backend" and v == PREFILL_AS_DECODE else v


def rule_change(r) -> str:
    return texts.RULE_EVENT[r.event].format(rule=r.rule, backend=r.backend)


def rendered_sorted(rules: Iterable) -> list:
    """Rule changes in display order: fired, stopped, then rejections (alphabetical)."""
    cat = {"fired": 0, "stopped": 1}
    return sorted(rules, key=lambda r: (cat.get(r.event, 2), rule_change(r)))


def warning_line(w) -> str:
    """A warning with its group, as a cell lists it."""
    return w.text if w.group == "model" else f"{texts.group_label(w.group)}: {w.text}"


def warning_order(ws: Iterable) -> tuple:
    return tuple(sorted(ws, key=warning_line))


def detail(d) -> str:
    """A block detail: a change line, a claims warning's claims in one group, or a warning's groups."""
    if hasattr(d, "changes"):
        return change_line(d)
    if hasattr(d, "claims"):
        return f"{texts.group_label(d.group)}: {texts.claims_list(d.code, d.claims)}"
    return f"in {', '.join(texts.group_label(g) for g in d.groups)}"


def _selection_summary(summary) -> str:
    return "; ".join(f"{texts.group_label(gid)}: {label}" for gid, label in summary)


def block_title(b) -> str:
    """What the cells of a block share, as text."""
    k = b.key
    if b.kind == "became_valid":
        return f"was: {k[0].text}; now: {_selection_summary(k[1])}"
    if b.kind == "error_changed":
        return f"{k[0].text} -> {k[1].text}"
    if b.kind == "became_invalid":
        return k[0].text if k[0] is not None else ""
    if b.kind == "selection":
        return "; ".join(change_line(line) for line in k)
    code, what = k
    if code in texts.CLAIMS_TITLE:
        return texts.CLAIMS_TITLE[code].format(gpu=what)
    return what.text


# ---------------------------------------------------------------- outputs


def _is_note(b) -> bool:
    return b.warning and b.key[0] in notes.NOTE_CODES


def _head(d, verbose: bool = True) -> str:
    s = d.summary()
    new = s["new_warnings"] if verbose else sum(any(not notes.is_note(w) for w in c.warnings_added) for c in d.changed)
    return (
        f"kselect diff {d.a_label} -> {d.b_label} over matrix {d.spec.name} ({s['cells']} cells): "
        f"{s['changed']} changed ({s['selection_changed']} selection, {s['became_invalid']} became invalid, "
        f"{new} with new warnings), {s['unchanged']} unchanged"
    )


def note_line(d) -> str:
    """The notes (warnings about the evidence: selector/outputs/notes.py) as one line; '' when none moved."""
    parts = []
    for kind, attr in (("new", "warnings_added"), ("gone", "warnings_removed")):
        n = sum(any(notes.is_note(w) for w in getattr(c, attr)) for c in d.changed)
        if n:
            codes = sorted({w.code for c in d.changed for w in getattr(c, attr) if notes.is_note(w)})
            parts.append(f"{n} cells with {kind} notes ({', '.join(texts.NOTE_LABEL[x] for x in codes)})")
    return f"note: {'; '.join(parts)} ({notes.VERBOSE_HINT})" if parts else ""


def _blocks(d, verbose: bool) -> list:
    return [b for b in d.blocks if verbose or not _is_note(b)]


def to_table(d, limit: int = 8, verbose: bool = True) -> str:
    out = [_head(d, verbose)]
    note = "" if verbose else note_line(d)
    out += [note] if note else []
    if not d.blocks:
        out.append("no cell changed")
        return "\n".join(out)
    kind = None
    for i, b in enumerate(_blocks(d, verbose), 1):
        if b.kind != kind:
            kind = b.kind
            out += ["", f"== {texts.DIFF_KIND[kind].upper()} =="]
        n = f"{len(b.cells)} cell{'s' if len(b.cells) != 1 else ''}"
        out.append(f"[{i}] {b.title or texts.NO_BACKEND_CHANGE}  ({n})")
        for j, p in enumerate(b.patterns[:limit]):
            out.append(f"    {'where' if j == 0 else '   or'}: {p}")
        if len(b.patterns) > limit:
            out.append(f"    ... and {len(b.patterns) - limit} more patterns (format=json lists every cell)")
        for change, where in b.details[: 2 * limit]:
            out.append(f"    {detail(change)}" + (f"   [{where}]" if where else ""))
        if len(b.details) > 2 * limit:
            out.append(f"    ... and {len(b.details) - 2 * limit} more (format=json lists them)")
        if b.rules:
            out.append(f"    rules: {', '.join(map(rule_change, b.rules))}")
        if b.example is not None:
            out.append(f"    e.g. {b.example.cell.id}: {b.example.cell.command()}")
    return "\n".join(out)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(d, limit: int = 8, verbose: bool = True) -> str:
    out = [f"**{_md(_head(d, verbose))}**"]
    note = "" if verbose else note_line(d)
    out += ["", _md(note)] if note else []
    if not d.blocks:
        return "\n".join(out) + "\n\nNo cell changed."
    kind = None
    for b in _blocks(d, verbose):
        warn = b.warning
        if b.kind != kind:
            kind = b.kind
            out += ["", f"#### {':warning: ' if kind in ('became_invalid', 'new_warning') else ''}{texts.DIFF_KIND[kind]}", ""]
            out += ["| cells | where | warning |" if warn else "| cells | where | change | rules |"]
            out += ["|---:|---|---|" if warn else "|---:|---|---|---|"]
        pats = b.patterns[:limit] + ([f"… {len(b.patterns) - limit} more"] if len(b.patterns) > limit else [])
        where = "<br>".join(f"`{_md(p)}`" for p in pats)
        lines = [_md(detail(c)) + (f" *[{_md(w)}]*" if w else "") for c, w in b.details[: 2 * limit]]
        if len(b.details) > 2 * limit:
            lines.append(f"… {len(b.details) - 2 * limit} more")
        if warn:
            out.append(f"| {len(b.cells)} | {where} | {'<br>'.join([_md(b.title)] + lines)} |")
            continue
        change = ([f"**{_md(b.title)}**"] if b.title else []) + lines
        rules = "<br>".join(f"`{_md(rule_change(r))}`" if r.event in ("fired", "stopped") else _md(rule_change(r)) for r in b.rules)
        out.append(f"| {len(b.cells)} | {where} | {'<br>'.join(change)} | {rules} |")
    return "\n".join(out)


def block_dict(b) -> dict:
    return {
        "kind": b.kind,
        "title": b.title,
        "patterns": b.patterns,
        "details": [{"change": detail(c), "where": w or None} for c, w in b.details],
        "rules": [rule_change(r) for r in b.rules],
        "rule_changes": [{"event": r.event, "rule": r.rule, "backend": r.backend} for r in b.rules],
        "cells": [c.id for c in b.cells],
        "example": b.example.cell.command() if b.example else None,
    }


def to_json(d) -> str:
    return json.dumps(
        {"a": d.a_label, "b": d.b_label, "matrix": d.spec.name, "summary": d.summary(), "blocks": [block_dict(b) for b in d.blocks]},
        indent=2,
    )


def render(d, fmt: str, limit: int = 8, verbose: bool = True) -> str:
    """verbose=False: notes (selector/outputs/notes.py) as one line; json always lists everything."""
    from ..base.errors import KSelectError  # noqa: PLC0415

    if fmt == "json":
        return to_json(d)
    if fmt == "markdown":
        return to_markdown(d, limit, verbose)
    if fmt == "table":
        return to_table(d, limit, verbose)
    raise KSelectError(f"diff: format={fmt!r}; allowed: table, markdown, json")
