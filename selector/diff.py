"""Review diff: what an overlay (or a change to conf/) does to every cell of the matrix.

    kselect diff a='[]' b='[pr48666]'                         # two overlay sets
    kselect diff a='[pr48666]' b='[pr48666,pr52987]' check=true
    kselect diff a=git:HEAD~1 b=worktree format=markdown       # two revisions of conf/
    kselect diff a=git:main:[pr48666] b=worktree:[pr53175] matrix=smoke

Arguments (key=value): a, b (`[overlays]`, `worktree`, `worktree:[overlays]`, `git:<rev>`,
`git:<rev>:[overlays]`), matrix (a file of conf/matrix/, default `default`), format (table |
markdown | json), check (true: exit 1 when any cell changed), overlays (the overlay set of a
source that names none, default `[]`), repo (the git repository, default this checkout),
limit (patterns shown per block, default 8; json lists every cell), rules (both sides under this
rules option; default: the one the matrix declares, e.g. `rules: post_pr52987`).

Only changed cells are printed, grouped so the pattern shows: cells whose selection changed
in the same way are collapsed along the matrix axes into products such as
`sm90 × kv=fp8|fp8_e4m3 × multimodal=true` (axes that take every value are left out; a
skipped-by-declaration cell never blocks a merge). Each block names the rule ids responsible:
rules that fired on one side only (`+id` new in b, `-id` gone), and rejections that appeared
or disappeared (the `[rule.id]` tags of the rejected reasons). Cells that became invalid and
warnings that newly appear come first.

A git revision is read with `git archive <rev> conf` into a temporary directory and composed
from there (`compose_raw(conf_dir=...)`); the selector code, the matrix declaration and the
conformance data are the worktree's.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from .api import CONF_DIR
from .cli import run_cli
from .errors import KSelectError
from .matrix import Builder, Cell, CellResult, MatrixSpec, cli_args, expand, load_matrix, parse_overlays, resolve_cells
from .selection import GroupSelection

# ---------------------------------------------------------------- what is compared

GROUP_FIELDS = (
    ("backend", lambda g: g.backend + (f" v{g.flash_attn_version}" if g.flash_attn_version else "")),
    ("kernel block", lambda g: str(g.kernel_block_size)),
    ("kv block", lambda g: str(g.kv_block_size)),
    ("kv dtype", lambda g: g.kv_cache_dtype),
    ("quant_query", lambda g: "true" if g.quant_query else "false"),
    ("descale", lambda g: g.descale),
    ("kv scales", lambda g: g.kv_scales),
    ("mm_prefix", lambda g: "true" if g.mm_prefix else "false"),
    ("layers", lambda g: ",".join(map(str, g.layers))),
)
_TAG = re.compile(r"\[([a-z][\w.]*)\]\s*$")


def group_name(g: GroupSelection) -> str:
    return f"draft:{g.kind}" if g.draft else g.kind


def state(r: CellResult) -> dict[str, dict[str, str]]:
    """group name -> field -> value; '' holds the model-level fields."""
    if r.selection is None:
        return {}
    out = {"": {"cache block": str(r.selection.block_size)}}
    for g in r.selection.groups:
        out[group_name(g)] = {name: fn(g) for name, fn in GROUP_FIELDS}
    return out


def _rule_ids(r: CellResult) -> set[str]:
    if r.selection is None:
        return set()
    ids = set(r.selection.trace)
    for g in r.selection.groups:
        ids.update(g.trace)
    return {i for i in ids if not i.startswith(("builtin.", "pin."))}


def _rejections(r: CellResult) -> set[tuple[str, str]]:
    """(backend, tag) for every rejected reason of the cell (invalid cells: the error's)."""
    out = set()
    sources = [r.rejected] if r.selection is None else [g.rejected for g in r.selection.groups]
    for rej in sources:
        for backend, reasons in rej.items():
            for reason in reasons:
                m = _TAG.search(reason)
                out.add((backend, m[1] if m else reason))
    return out


def _warning_text(group: str, w: str) -> str:
    return w if group == "model" else f"{group}: {w}"


# ---------------------------------------------------------------- per-cell diff


@dataclass(frozen=True)
class CellDiff:
    cell: Cell  # the environment (no overlays)
    a: CellResult
    b: CellResult
    outcome: str | None  # None, "became invalid", "became valid", "invalid (error changed)"
    backend: tuple[str, ...]  # backend changes, e.g. "all groups: TRITON_ATTN -> FLASH_ATTN v4"
    lines: tuple[str, ...]  # every other field change, one line per set of groups that changed alike
    warnings_added: tuple[str, ...]
    warnings_removed: tuple[str, ...]
    rules: tuple[str, ...]

    @property
    def selection_changed(self) -> bool:
        return bool(self.outcome or self.backend or self.lines)

    @property
    def changed(self) -> bool:
        return self.selection_changed or bool(self.warnings_added or self.warnings_removed)


def _fold(groups: list[str], changed: set[str]) -> tuple[str, ...]:
    """Names for the groups in `changed`: a draft group that changed like its target is folded
    into the target's name; every group -> "all groups"."""
    if changed >= set(groups) and len(groups) > 1:
        return ("all groups",)
    out = []
    for g in groups:
        if g not in changed:
            continue
        if g.startswith("draft:") and g[6:] in changed:
            continue
        out.append(g)
    return tuple(out)


def change_lines(sa: dict[str, dict[str, str]], sb: dict[str, dict[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(backend lines, other lines) of a cell whose both sides resolved. Fields that changed the
    same way on the same groups share a line; a draft group that changed like its target is
    named by the target ("sliding_window" covers draft:sliding_window)."""
    groups = [g for g in sa if g] + [g for g in sb if g and g not in sa]
    per_change: dict[tuple[str, str, str], set[str]] = {}
    other: list[str] = []
    for g in groups:
        if g not in sa or g not in sb:
            other.append(f"{g}: group {'added' if g not in sa else 'removed'}")
            continue
        for name, _ in GROUP_FIELDS:
            va, vb = sa[g][name], sb[g][name]
            if va != vb:
                per_change.setdefault((name, va, vb), set()).add(g)
    common = [g for g in groups if g in sa and g in sb]
    # a draft group changed "like its target" only if every field change of the target is its own too
    fields = [f for f, _ in GROUP_FIELDS]
    backend: dict[tuple[str, ...], list[str]] = {}
    rest: dict[tuple[str, ...], list[str]] = {}
    for (name, va, vb), gs in sorted(per_change.items(), key=lambda kv: fields.index(kv[0][0])):
        who = _fold(common, gs)
        if name == "backend":
            backend.setdefault(who, []).append(f"{va} -> {vb}")
        else:
            rest.setdefault(who, []).append(f"{name} {va} -> {vb}")
    order = {g: i for i, g in enumerate(["all groups"] + common)}
    fmt = lambda d: tuple(f"{', '.join(who)}: {', '.join(d[who])}" for who in sorted(d, key=lambda w: [order[x] for x in w]))  # noqa: E731
    ca, cb = sa.get("", {}).get("cache block"), sb.get("", {}).get("cache block")
    cache = (f"cache block {ca} -> {cb}",) if ca != cb and ca and cb else ()
    return fmt(backend), tuple(other) + fmt(rest) + cache


def diff_cell(a: CellResult, b: CellResult) -> CellDiff:
    outcome = None
    if a.outcome == "ok" and b.outcome == "invalid":
        outcome = "became invalid"
    elif a.outcome == "invalid" and b.outcome == "ok":
        outcome = "became valid"
    elif a.outcome == b.outcome == "invalid" and a.error != b.error:
        outcome = "invalid (error changed)"
    backend, lines = change_lines(state(a), state(b)) if a.outcome == b.outcome == "ok" else ((), ())
    wa = {_warning_text(g, w) for g, w in a.warnings}
    wb = {_warning_text(g, w) for g, w in b.warnings}
    rules: list[str] = []
    if outcome or backend or lines or wa != wb:
        ia, ib = _rule_ids(a), _rule_ids(b)
        rules += [f"+{i}" for i in sorted(ib - ia)] + [f"-{i}" for i in sorted(ia - ib)]
        ra, rb = _rejections(a), _rejections(b)
        rules += [f"{bk} now rejected by {t}" for bk, t in sorted(rb - ra)]
        rules += [f"{bk} no longer rejected by {t}" for bk, t in sorted(ra - rb)]
    return CellDiff(
        cell=a.cell.with_overlays(()),
        a=a,
        b=b,
        outcome=outcome,
        backend=backend,
        lines=lines,
        warnings_added=tuple(sorted(wb - wa)),
        warnings_removed=tuple(sorted(wa - wb)),
        rules=tuple(rules),
    )


# ---------------------------------------------------------------- collapsing cells into patterns

Rect = tuple[frozenset, ...]


def collapse(keys: set[tuple], universe: set[tuple], values: Sequence[Sequence]) -> list[Rect]:
    """Cover `keys` (cells as axis-value tuples) by few axis products. A product may include
    cells outside `universe` (skipped by declaration: don't-cares) but no other universe cell."""
    n = len(values)
    rects: list[Rect] = [tuple(frozenset([v]) for v in k) for k in keys]

    def exact_merges(rects: list[Rect]) -> list[Rect]:
        changed = True
        while changed:
            changed = False
            for i in reversed(range(n)):
                groups: dict[tuple, list[Rect]] = {}
                for r in rects:
                    groups.setdefault(r[:i] + r[i + 1 :], []).append(r)
                if len(groups) < len(rects):
                    changed = True
                    rects = [rs[0][:i] + (frozenset().union(*(r[i] for r in rs)),) + rs[0][i + 1 :] for rs in groups.values()]
        return rects

    rects = exact_merges(rects)
    if 1 < len(rects) <= 64:
        merged = True
        while merged:
            merged = False
            for r1, r2 in itertools.combinations(rects, 2):
                cand = tuple(x | y for x, y in zip(r1, r2))
                if all(c in keys or c not in universe for c in itertools.product(*cand)):
                    rects = [r for r in rects if not all(x <= y for x, y in zip(r, cand))] + [cand]
                    rects = exact_merges(rects)
                    merged = True
                    break
    rects = [_widen(r, keys, universe, values) for r in rects]
    order = [{v: i for i, v in enumerate(vals)} for vals in values]
    return sorted(rects, key=lambda r: [sorted(order[i][v] for v in s) for i, s in enumerate(r)])


def _widen(rect: Rect, keys: set[tuple], universe: set[tuple], values: Sequence[Sequence]) -> Rect:
    """Let an axis take every value where the extra cells are all don't-cares (shorter patterns)."""
    r = list(rect)
    for i, vals in enumerate(values):
        if len(r[i]) == len(vals):
            continue
        cand = r[:i] + [frozenset(vals)] + r[i + 1 :]
        if all(c in keys or c not in universe for c in itertools.product(*cand)):
            r = cand
    return tuple(r)


def _fmt_value(axis: str, v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


_LABEL = {"kv_cache": "kv", "spec_decode": "spec", "multimodal": "multimodal", "dtype": "dtype", "scales": "scales", "pin": "pin"}


def render_rect(rect: Rect, axes: Sequence[str], values: Sequence[Sequence]) -> str:
    parts = []
    for axis, vals, allv in zip(axes, rect, values):
        if set(vals) >= set(allv):
            continue
        ordered = [v for v in allv if v in vals]
        text = "|".join(_fmt_value(axis, v) for v in ordered)
        if len(ordered) > 1 and all(isinstance(v, str) for v in ordered):
            p = _common_prefix(ordered)
            if len(p) >= 2 and [v for v in allv if v.startswith(p)] == ordered:
                text = p + "*"
        parts.append(text if axis in ("platform", "model") else f"{_LABEL[axis]}={text}")
    return " × ".join(parts) or "every cell"


def _common_prefix(xs: list[str]) -> str:
    p = xs[0]
    for x in xs[1:]:
        while not x.startswith(p):
            p = p[:-1]
    return p


# ---------------------------------------------------------------- the matrix diff


@dataclass
class Block:
    """Cells that changed alike. kind: "became invalid" | "invalid (error changed)" | "new warning" |
    "became valid" | "selection" | "warning gone"."""

    kind: str
    title: str  # selection: the backend change ("" if none); otherwise the error / warning text
    cells: list[Cell] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)  # (change, sub-pattern or "" = every cell)
    rules: list[str] = field(default_factory=list)
    example: CellDiff | None = None

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "title": self.title,
            "patterns": self.patterns,
            "details": [{"change": c, "where": w or None} for c, w in self.details],
            "rules": self.rules,
            "cells": [c.id for c in self.cells],
            "example": self.example.cell.command() if self.example else None,
        }


KIND_ORDER = ("became invalid", "invalid (error changed)", "new warning", "became valid", "selection", "warning gone")


@dataclass
class MatrixDiff:
    spec: MatrixSpec
    a_label: str
    b_label: str
    cells: list[CellDiff]
    blocks: list[Block]

    @property
    def changed(self) -> list[CellDiff]:
        return [c for c in self.cells if c.changed]

    def summary(self) -> dict:
        ch = self.changed
        return {
            "cells": len(self.cells),
            "changed": len(ch),
            "selection_changed": sum(c.selection_changed for c in ch),
            "became_invalid": sum(c.outcome == "became invalid" for c in ch),
            "became_valid": sum(c.outcome == "became valid" for c in ch),
            "new_warnings": sum(bool(c.warnings_added) for c in ch),
            "unchanged": len(self.cells) - len(ch),
        }


def diff_results(spec: MatrixSpec, ra: list[CellResult], rb: list[CellResult], a_label: str = "a", b_label: str = "b") -> MatrixDiff:
    """Bucket the changed cells: by outcome + error, by backend change (other field changes are
    details of the block, each with its own sub-pattern), by added/removed warning."""
    if [r.cell.env_id for r in ra] != [r.cell.env_id for r in rb]:
        raise KSelectError("diff: the two sides were resolved over different cells")
    cells = [diff_cell(x, y) for x, y in zip(ra, rb)]
    axes = spec.declared
    values = [spec.values(a) for a in axes]
    universe = {c.cell.key(axes) for c in cells}

    buckets: dict[tuple[str, str], list[CellDiff]] = {}
    wdetails: dict[tuple[str, str, Cell], list[str]] = {}
    for c in cells:
        if c.outcome == "became valid":
            buckets.setdefault((c.outcome, f"was: {c.a.error}; now: {'; '.join(_summary_line(c.b))}"), []).append(c)
        elif c.outcome == "invalid (error changed)":
            buckets.setdefault((c.outcome, f"{c.a.error} -> {c.b.error}"), []).append(c)
        elif c.outcome:
            buckets.setdefault((c.outcome, c.b.error or ""), []).append(c)
        elif c.backend or c.lines:
            buckets.setdefault(("selection", "; ".join(c.backend)), []).append(c)
        for kind, ws in (("new warning", c.warnings_added), ("warning gone", c.warnings_removed)):
            for title, details in _warning_buckets(ws).items():
                buckets.setdefault((kind, title), []).append(c)
                wdetails.setdefault((kind, title, c.cell), []).extend(details)

    blocks = []
    for (kind, title), members in buckets.items():
        keys = {m.cell.key(axes) for m in members}
        patterns = [render_rect(r, axes, values) for r in collapse(keys, universe, values)]
        details = []
        if kind in ("selection", "became valid", "new warning", "warning gone"):
            seen: dict[str, set[tuple]] = {}
            for m in members:
                for line in m.lines if kind in ("selection", "became valid") else wdetails[(kind, title, m.cell)]:
                    seen.setdefault(line, set()).add(m.cell.key(axes))
            for line, ks in seen.items():
                where = "" if ks == keys else " or ".join(render_rect(r, axes, values) for r in collapse(ks, keys, values))
                details.append((line, where))
        rules = sorted({r for m in members for r in m.rules}, key=_rule_sort)
        if kind in ("new warning", "warning gone"):
            rules = []  # the warning names its rule
        blocks.append(Block(kind, title, [m.cell for m in members], patterns, details, rules, members[0]))
    blocks.sort(key=lambda b: (KIND_ORDER.index(b.kind), _warning_rank(b), -len(b.cells), b.title))
    return MatrixDiff(spec, a_label, b_label, cells, blocks)


_CLAIMS = re.compile(r"^(?P<status>unverified|REFUTED) on (?P<where>\S+): (?P<claims>.*) \[conformance\]$")


def _warning_buckets(ws: Sequence[str]) -> dict[str, list[str]]:
    """Warnings of one cell -> {title: details}. The group prefix becomes a detail ("in
    sliding_window, full_attention"); hardware-claim warnings share one title per status and
    GPU, their claims become details."""
    out: dict[str, list[str]] = {}
    groups: dict[str, list[str]] = {}
    for w in ws:
        group, sep, text = w.partition(": ")
        if not sep or " " in group:  # a model-level warning has no group prefix
            group, text = "model", w
        m = _CLAIMS.match(text)
        if m:
            out.setdefault(f"{m['status']} on {m['where']}: hardware claims of the selected kernels [conformance]", []).append(
                f"{group}: {m['claims']}"
            )
        else:
            groups.setdefault(text, []).append(group)
    for text, gs in groups.items():
        out[text] = [f"in {', '.join(gs)}"]
    return out


def _summary_line(r: CellResult) -> tuple[str, ...]:
    if r.selection is None:
        return ()
    return tuple(f"{group_name(g)}: {g.backend}{f' v{g.flash_attn_version}' if g.flash_attn_version else ''}" for g in r.selection.groups)


def _rule_sort(r: str) -> tuple:
    return (0 if r.startswith("+") else 1 if r.startswith("-") else 2, r)


def _warning_rank(b: Block) -> int:
    """Among warnings: refuted hardware claims, then rule warnings, then unverified claims."""
    if b.kind not in ("new warning", "warning gone"):
        return 0
    if "REFUTED" in b.title:
        return 0
    return 2 if "[conformance]" in b.title else 1


# ---------------------------------------------------------------- sources: overlay sets, git revisions


@dataclass(frozen=True)
class Source:
    label: str
    conf_dir: Path
    overlays: tuple[str, ...]


def parse_source(text: str, default_overlays: tuple[str, ...], repo: Path, stack: ExitStack, conf_rel: str) -> Source:
    t = text.strip()
    if t.startswith("["):
        return Source(t, repo / conf_rel, parse_overlays(t))
    head, ov = t, default_overlays
    m = re.match(r"^(.*?):(\[.*\])$", t)
    if m:
        head, ov = m[1], parse_overlays(m[2])
    if head == "worktree":
        return Source(t, repo / conf_rel, ov)
    if head.startswith("git:"):
        rev = head[4:]
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kselect-diff-")))
        return Source(t, git_conf(repo, rev, tmp, conf_rel), ov)
    raise KSelectError(f"diff: bad source {text!r}; expected [overlays], worktree[:[overlays]] or git:<rev>[:[overlays]]")


def git_conf(repo: Path, rev: str, dest: Path, conf_rel: str = "conf") -> Path:
    """Extract `<rev>:conf` into dest (git archive) and return the conf directory there."""
    p = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev, conf_rel], capture_output=True)
    if p.returncode != 0:
        raise KSelectError(f"diff: git archive {rev} {conf_rel} failed in {repo}: {p.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / conf_rel


def run_diff(a: Source, b: Source, spec: MatrixSpec) -> MatrixDiff:
    ra = resolve_cells(expand(spec, a.overlays), builder=Builder(a.conf_dir))
    rb = resolve_cells(expand(spec, b.overlays), builder=Builder(b.conf_dir))
    return diff_results(spec, ra, rb, a.label, b.label)


def diff_overlays(a: Sequence[str], b: Sequence[str], matrix: str | MatrixSpec = "default", conf_dir: Path = CONF_DIR) -> MatrixDiff:
    """Convenience for tests and notebooks: two overlay sets of one conf directory."""
    spec = matrix if isinstance(matrix, MatrixSpec) else load_matrix(matrix, conf_dir)
    la, lb = f"[{','.join(a)}]", f"[{','.join(b)}]"
    return run_diff(Source(la, Path(conf_dir), tuple(a)), Source(lb, Path(conf_dir), tuple(b)), spec)


# ---------------------------------------------------------------- output


def _head(d: MatrixDiff) -> str:
    s = d.summary()
    return (
        f"kselect diff a={d.a_label} b={d.b_label} over matrix {d.spec.name} ({s['cells']} cells): "
        f"{s['changed']} changed ({s['selection_changed']} selection, {s['became_invalid']} became invalid, "
        f"{s['new_warnings']} with new warnings), {s['unchanged']} unchanged"
    )


def to_table(d: MatrixDiff, limit: int = 8) -> str:
    out = [_head(d)]
    if not d.blocks:
        out.append("no cell changed")
        return "\n".join(out)
    kind = None
    for i, b in enumerate(d.blocks, 1):
        if b.kind != kind:
            kind = b.kind
            out += ["", f"== {kind.upper()} =="]
        n = f"{len(b.cells)} cell{'s' if len(b.cells) != 1 else ''}"
        out.append(f"[{i}] {b.title or 'no backend change'}  ({n})")
        for j, p in enumerate(b.patterns[:limit]):
            out.append(f"    {'where' if j == 0 else '   or'}: {p}")
        if len(b.patterns) > limit:
            out.append(f"    ... and {len(b.patterns) - limit} more patterns (format=json lists every cell)")
        for change, where in b.details[: 2 * limit]:
            out.append(f"    {change}" + (f"   [{where}]" if where else ""))
        if len(b.details) > 2 * limit:
            out.append(f"    ... and {len(b.details) - 2 * limit} more (format=json lists them)")
        if b.rules:
            out.append(f"    rules: {', '.join(b.rules)}")
        if b.example is not None:
            out.append(f"    e.g. {b.example.cell.id}: {b.example.cell.command()}")
    return "\n".join(out)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(d: MatrixDiff, limit: int = 8) -> str:
    out = [f"**{_md(_head(d))}**"]
    if not d.blocks:
        return out[0] + "\n\nNo cell changed."
    kind = None
    for b in d.blocks:
        warn = b.kind in ("new warning", "warning gone")
        if b.kind != kind:
            kind = b.kind
            out += ["", f"#### {':warning: ' if kind in ('became invalid', 'new warning') else ''}{kind}", ""]
            out += ["| cells | where | warning |" if warn else "| cells | where | change | rules |"]
            out += ["|---:|---|---|" if warn else "|---:|---|---|---|"]
        pats = b.patterns[:limit] + ([f"… {len(b.patterns) - limit} more"] if len(b.patterns) > limit else [])
        where = "<br>".join(f"`{_md(p)}`" for p in pats)
        if warn:
            details = [_md(c) + (f" *[{_md(w)}]*" if w else "") for c, w in b.details[: 2 * limit]]
            if len(b.details) > 2 * limit:
                details.append(f"… {len(b.details) - 2 * limit} more")
            out.append(f"| {len(b.cells)} | {where} | {'<br>'.join([_md(b.title)] + details)} |")
            continue
        change = [f"**{_md(b.title)}**"] if b.title else []
        change += [_md(c) + (f" *[{_md(w)}]*" if w else "") for c, w in b.details[: 2 * limit]]
        if len(b.details) > 2 * limit:
            change.append(f"… {len(b.details) - 2 * limit} more")
        rules = "<br>".join(f"`{_md(r)}`" if r[:1] in "+-" else _md(r) for r in b.rules)
        out.append(f"| {len(b.cells)} | {where} | {'<br>'.join(change)} | {rules} |")
    return "\n".join(out)


def to_json(d: MatrixDiff) -> str:
    return json.dumps(
        {
            "a": d.a_label,
            "b": d.b_label,
            "matrix": d.spec.name,
            "summary": d.summary(),
            "blocks": [b.as_dict() for b in d.blocks],
        },
        indent=2,
    )


def render(d: MatrixDiff, fmt: str, limit: int = 8) -> str:
    if fmt == "json":
        return to_json(d)
    if fmt == "markdown":
        return to_markdown(d, limit)
    if fmt == "table":
        return to_table(d, limit)
    raise KSelectError(f"diff: format={fmt!r}; allowed: table, markdown, json")


DEFAULTS = {"a": "[]", "b": "[]", "matrix": "default", "format": "table", "check": False, "overlays": "[]",
            "repo": "", "conf": "conf", "limit": 8, "rules": ""}  # fmt: skip


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    args = cli_args(argv, DEFAULTS, "kselect diff")
    if args["format"] not in ("table", "markdown", "json"):
        raise KSelectError(f"diff: format={args['format']!r}; allowed: table, markdown, json")
    repo = Path(args["repo"]).resolve() if args["repo"] else CONF_DIR.parent
    with ExitStack() as stack:
        ov = parse_overlays(args["overlays"])
        a = parse_source(args["a"], ov, repo, stack, args["conf"])
        b = parse_source(args["b"], ov, repo, stack, args["conf"])
        spec = load_matrix(args["matrix"], repo / args["conf"])
        if args["rules"]:  # both sides under this rules option (default: the one the matrix declares)
            spec = spec.model_copy(update={"rules": args["rules"]})
        d = run_diff(a, b, spec)
    print(render(d, args["format"], args["limit"]))
    return 1 if args["check"] and d.changed else 0


if __name__ == "__main__":
    run_cli(main)
