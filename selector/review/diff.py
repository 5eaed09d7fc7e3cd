"""Review diff: what an overlay (or a change to conf/) does to every cell of the matrix.

    kselect diff matrix=seed b.overlay=[pr48666]              # what #48666 changes
    kselect diff matrix=seed a.overlay=[pr48666] b.overlay=[pr48666,pr52987] check=true   # its revert
    kselect diff a.conf=git:HEAD format=markdown               # your uncommitted conf/ change
    kselect diff a.conf=git:main a.overlay=[pr48666] b.overlay=[pr53175] matrix=seed_smoke

A Hydra app (structured config `kselect_diff`): a and b are the two sides, each a `conf`
(`worktree`, or `git:<rev>`: conf/ at that revision) and an `overlay` list (b.overlay follows
a.overlay unless given); matrix (a file of conf/matrix/, default `default`), format (table |
markdown | json), check (true: exit 1 when any cell changed), repo (the git repository,
default this checkout), conf_path (conf/ inside it), limit (patterns shown per block, default
8; json lists every cell), verbose (true: every warning block; default: notes about the evidence -
claims never run on the GPU, data from other kernel versions - as one line), rules (both sides under this rules option; default: the one the matrix
declares, e.g. `rules: post_pr52987`, else conf/config.yaml's default release), review (true: the review
check, one diff per rules option a conf/ change reaches over each matrix declaring `review: true`,
selector/review/touched.py), a.rules / b.rules (one side's; never follows the other: a
revision from before a rules option existed names its rules differently). A side whose conf tree
lacks the matrix's rules runs its own tree's default and says so on stderr and in its label; a
rules option named for a side it lacks is an exit-2 error naming `a.rules=` / `b.rules=`. `-m b.overlay=[pr48666],[pr53175]` runs one diff per value. a.objective / b.objective
(`objective=<name>` composed into every cell of that side; b.objective follows a.objective):
which selections an objective moves, e.g. `b.objective=latency`.

Only changed cells are printed, grouped so the pattern shows: cells whose selection changed
in the same way are collapsed along the matrix axes into products such as
`sm90 × kv=fp8|fp8_e4m3 × multimodal=true` (axes that take every value are left out; a
skipped-by-declaration cell never blocks a merge). Each block names the rule ids responsible:
rules that fired on one side only (`+id` new in b, `-id` gone), and rejections that appeared
or disappeared (the rule id or capability field of each rejection record). Cells that became
invalid and warnings that newly appear come first. The diff holds typed outcomes
(`diff_records.py`); `diff_render.py` turns them into text.

A git revision is read with `git archive <rev> conf` into a temporary directory and composed
from there (`compose_raw(conf_dir=...)`); each side selects under its own conf tree's evidence (its
conf/conformance and conf/perf, selector/evidence/evidence.py); the selector code and the matrix
declaration are the worktree's. The command: kselect/commands/diff.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path

from ..config.compose import CONF_DIR

from ..review.diff_records import ALL_GROUPS, PREFILL_AS_DECODE, Change, ChangeLine, ClaimsDetail, GroupsDetail, RuleChange
from ..review.diff_render import render, rendered_sorted, warning_order
from ..review.diff_sources import Source
from ..base.errors import KSelectError
from ..evidence.evidence import Evidence
from ..review.parallel import paused_gc
from ..review.matrix import Builder, Cell, CellResult, MatrixSpec, expand, load_matrix, resolve_cells
from ..review.patterns import collapse, render_rect
from ..outputs.records import ClaimsWarning, Warning
from ..config.vocab import parse_group_id

__all__ = ["CellDiff", "Block", "MatrixDiff", "collapse", "diff_cell", "diff_results", "render", "render_rect", "run_diff"]

# ---------------------------------------------------------------- what is compared

GROUP_FIELDS = (
    ("backend", lambda g: g.label),
    ("kernel_block", lambda g: str(g.kernel_block_size)),
    ("kv_block", lambda g: str(g.kv_block_size)),
    ("kv_dtype", lambda g: g.kv_cache_dtype),
    ("quant_query", lambda g: "true" if g.quant_query else "false"),
    ("descale", lambda g: g.descale),
    ("kv_scales", lambda g: g.kv_scales),
    ("mm_prefix", lambda g: "true" if g.mm_prefix else "false"),
    ("layers", lambda g: ",".join(map(str, g.layers))),
    ("prefill_backend", lambda g: g.prefill.label if g.prefill else PREFILL_AS_DECODE),
)
FIELD_IDS = tuple(f for f, _ in GROUP_FIELDS)
# the kernels a group runs: what a selection block is keyed and titled by (per phase: a prefill-only move is one)
KERNEL_FIELDS = ("backend", "prefill_backend")


def state(r: CellResult) -> dict[str, dict[str, str]]:
    """group id -> field -> value; '' holds the model-level fields."""
    if r.selection is None:
        return {}
    out = {"": {"cache_block": str(r.selection.block_size)}}
    for g in r.selection.groups:
        out[g.id] = {name: fn(g) for name, fn in GROUP_FIELDS}
    return out


def _rule_ids(r: CellResult) -> set[str]:
    if r.selection is None:
        return set()
    ids = set(r.selection.trace)
    for g in r.selection.groups:
        ids.update(g.trace)
    return {i for i in ids if not i.startswith(("builtin.", "pin."))}


def _rejections(r: CellResult) -> set[tuple[str, str]]:
    """(backend, source: rule id or capability field) of every rejection of the cell."""
    sources = [r.rejected] if r.selection is None else [g.rejected for g in r.selection.groups]
    return {(backend, x.source) for rej in sources for backend, xs in rej.items() for x in xs}


# ---------------------------------------------------------------- typed outcomes


@dataclass(frozen=True)
class CellDiff:
    cell: Cell  # the environment (no overlays)
    a: CellResult
    b: CellResult
    outcome: str | None  # None, became_invalid, became_valid, error_changed
    backend: tuple[ChangeLine, ...]  # backend changes
    lines: tuple[ChangeLine, ...]  # every other field change, one line per set of groups that changed alike
    warnings_added: tuple[Warning, ...]
    warnings_removed: tuple[Warning, ...]
    rules: tuple[RuleChange, ...]

    @property
    def selection_changed(self) -> bool:
        return bool(self.outcome or self.backend or self.lines)

    @property
    def changed(self) -> bool:
        return self.selection_changed or bool(self.warnings_added or self.warnings_removed)

    @property
    def fields(self) -> set[str]:
        """Every field that changed (backend lines included)."""
        return {f for line in self.backend + self.lines for f in line.fields}


def _fold(groups: list[str], changed: set[str]) -> tuple[str, ...]:
    """Names for the groups in `changed`: a draft group that changed like its target is folded
    into the target's; every group -> ALL_GROUPS."""
    if changed >= set(groups) and len(groups) > 1:
        return (ALL_GROUPS,)
    out = []
    for g in groups:
        if g not in changed:
            continue
        kind, draft = parse_group_id(g)
        if draft and kind in changed:
            continue
        out.append(g)
    return tuple(out)


def change_lines(sa: dict[str, dict[str, str]], sb: dict[str, dict[str, str]]) -> tuple[tuple[ChangeLine, ...], tuple[ChangeLine, ...]]:
    """(backend lines, other lines) of a cell whose both sides resolved. Fields that changed the
    same way on the same groups share a line; a draft group that changed like its target is
    named by the target."""
    groups = [g for g in sa if g] + [g for g in sb if g and g not in sa]
    per_change: dict[Change, set[str]] = {}
    other: list[ChangeLine] = []
    for g in groups:
        if g not in sa or g not in sb:
            other.append(ChangeLine(groups=(g,), event="group_added" if g not in sa else "group_removed"))
            continue
        for name in FIELD_IDS:
            va, vb = sa[g][name], sb[g][name]
            if va != vb:
                per_change.setdefault(Change(field=name, a=va, b=vb), set()).add(g)
    common = [g for g in groups if g in sa and g in sb]
    backend: dict[tuple[str, ...], list[Change]] = {}
    rest: dict[tuple[str, ...], list[Change]] = {}
    for ch, gs in sorted(per_change.items(), key=lambda kv: FIELD_IDS.index(kv[0].field)):
        (backend if ch.field in KERNEL_FIELDS else rest).setdefault(_fold(common, gs), []).append(ch)
    order = {g: i for i, g in enumerate([ALL_GROUPS] + common)}
    lines = lambda d: tuple(ChangeLine(groups=who, changes=tuple(d[who])) for who in sorted(d, key=lambda w: [order[x] for x in w]))  # noqa: E731
    ca, cb = sa.get("", {}).get("cache_block"), sb.get("", {}).get("cache_block")
    cache = (ChangeLine(groups=(), changes=(Change(field="cache_block", a=ca, b=cb),)),) if ca != cb and ca and cb else ()
    return lines(backend), tuple(other) + lines(rest) + cache


def diff_cell(a: CellResult, b: CellResult) -> CellDiff:
    outcome = None
    if a.outcome == "ok" and b.outcome == "invalid":
        outcome = "became_invalid"
    elif a.outcome == "invalid" and b.outcome == "ok":
        outcome = "became_valid"
    elif a.outcome == b.outcome == "invalid" and a.failure != b.failure:
        outcome = "error_changed"
    backend, lines = change_lines(state(a), state(b)) if a.outcome == b.outcome == "ok" else ((), ())
    wa, wb = set(a.warnings), set(b.warnings)
    wa, wb = _same_notes_moved(wa, wb)
    rules: list[RuleChange] = []
    if outcome or backend or lines or wa != wb:
        ia, ib = _rule_ids(a), _rule_ids(b)
        rules += [RuleChange(event="fired", rule=i) for i in sorted(ib - ia)] + [RuleChange(event="stopped", rule=i) for i in sorted(ia - ib)]
        ra, rb = _rejections(a), _rejections(b)
        rules += [RuleChange(event="now_rejected", rule=t, backend=bk) for bk, t in sorted(rb - ra)]
        rules += [RuleChange(event="no_longer_rejected", rule=t, backend=bk) for bk, t in sorted(ra - rb)]
    return CellDiff(
        cell=dc_replace(a.cell.with_overlays(()), rules=b.cell.rules),  # examples reproduce b's rules
        a=a,
        b=b,
        outcome=outcome,
        backend=backend,
        lines=lines,
        warnings_added=warning_order(wb - wa),
        warnings_removed=warning_order(wa - wb),
        rules=tuple(rules),
    )


def _same_notes_moved(wa: set, wb: set) -> tuple[set, set]:
    """An unverified-claims note of the same group and GPU on both sides whose claims differ (the kernel
    or page moved, which the selection lines show) is neither new nor gone: both sides keep it."""
    key = lambda w: (w.group, w.gpu) if isinstance(w, ClaimsWarning) and w.code == "claims_unverified" else None  # noqa: E731
    moved = {key(w) for w in wb - wa} & {key(w) for w in wa - wb} - {None}
    keep = lambda ws, other: {w for w in ws if w in other or key(w) not in moved}  # noqa: E731
    return keep(wa, wb), keep(wb, wa)


# ---------------------------------------------------------------- the matrix diff


@dataclass
class Block:
    """Cells that changed alike. kind: became_invalid | error_changed | new_warning | became_valid |
    selection | warning_gone. key: what they share (the failure(s), the backend lines, the warning)."""

    kind: str
    key: tuple
    cells: list[Cell] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)
    details: list[tuple[object, str]] = field(default_factory=list)  # (change line or warning detail, sub-pattern or "")
    rules: list[RuleChange] = field(default_factory=list)
    example: CellDiff | None = None

    @property
    def title(self) -> str:
        from ..review.diff_render import block_title  # noqa: PLC0415 - rendering lives at the edge

        return block_title(self)

    @property
    def warning(self) -> bool:
        return self.kind in ("new_warning", "warning_gone")


KIND_ORDER = ("became_invalid", "error_changed", "new_warning", "became_valid", "selection", "warning_gone")


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
            "became_invalid": sum(c.outcome == "became_invalid" for c in ch),
            "became_valid": sum(c.outcome == "became_valid" for c in ch),
            "new_warnings": sum(bool(c.warnings_added) for c in ch),
            "unchanged": len(self.cells) - len(ch),
        }


def _summary(r: CellResult) -> tuple[tuple[str, str], ...]:
    """(group id, kernel label) per group: what a cell that became valid now runs."""
    return tuple((g.id, g.label) for g in r.selection.groups) if r.selection else ()


def diff_results(spec: MatrixSpec, ra: list[CellResult], rb: list[CellResult], a_label: str = "a", b_label: str = "b") -> MatrixDiff:
    """Bucket the changed cells: by outcome + failure, by backend change (other field changes are
    details of the block, each with its own sub-pattern), by added/removed warning."""
    if [r.cell.env_id for r in ra] != [r.cell.env_id for r in rb]:
        raise KSelectError("diff: the two sides were resolved over different cells")
    cells = [diff_cell(x, y) for x, y in zip(ra, rb)]
    axes = spec.declared
    values = [spec.values(a) for a in axes]
    universe = {c.cell.key(axes) for c in cells}

    buckets: dict[tuple[str, tuple], list[CellDiff]] = {}
    wdetails: dict[tuple[str, tuple, Cell], list] = {}
    for c in cells:
        if c.outcome == "became_valid":
            buckets.setdefault((c.outcome, (c.a.failure, _summary(c.b))), []).append(c)
        elif c.outcome == "error_changed":
            buckets.setdefault((c.outcome, (c.a.failure, c.b.failure)), []).append(c)
        elif c.outcome:
            buckets.setdefault((c.outcome, (c.b.failure,)), []).append(c)
        elif c.backend or c.lines:
            buckets.setdefault(("selection", c.backend), []).append(c)
        for kind, ws in (("new_warning", c.warnings_added), ("warning_gone", c.warnings_removed)):
            for key, details in _warning_buckets(ws).items():
                buckets.setdefault((kind, key), []).append(c)
                wdetails.setdefault((kind, key, c.cell), []).extend(details)

    blocks = []
    for (kind, key), members in buckets.items():
        keys = {m.cell.key(axes) for m in members}
        patterns = [render_rect(r, axes, values) for r in collapse(keys, universe, values)]
        details = []
        if kind in ("selection", "became_valid", "new_warning", "warning_gone"):
            seen: dict[object, set[tuple]] = {}
            for m in members:
                for line in m.lines if kind in ("selection", "became_valid") else wdetails[(kind, key, m.cell)]:
                    seen.setdefault(line, set()).add(m.cell.key(axes))
            for line, ks in seen.items():
                where = "" if ks == keys else " or ".join(render_rect(r, axes, values) for r in collapse(ks, keys, values))
                details.append((line, where))
        rules = [] if kind in ("new_warning", "warning_gone") else rendered_sorted({r for m in members for r in m.rules})
        blocks.append(Block(kind, key, [m.cell for m in members], patterns, details, rules, members[0]))
    blocks.sort(key=lambda b: (KIND_ORDER.index(b.kind), _warning_rank(b), -len(b.cells), b.title))
    return MatrixDiff(spec, a_label, b_label, cells, blocks)


def _warning_buckets(ws: Sequence[Warning]) -> dict[tuple, list]:
    """Warnings of one cell -> {key: details}. Claims warnings share one key per status and GPU
    (their claims per group become details); other warnings are keyed by the warning without
    its group (the groups become one detail)."""
    out: dict[tuple, list] = {}
    groups: dict[Warning, list[str]] = {}
    for w in ws:
        if isinstance(w, ClaimsWarning):
            out.setdefault((w.code, w.gpu), []).append(ClaimsDetail(group=w.group, code=w.code, claims=w.claims))
        else:
            groups.setdefault(w.model_copy(update={"group": ""}), []).append(w.group)
    for w, gs in groups.items():
        out[(w.code, w)] = [GroupsDetail(groups=tuple(sorted(gs)))]  # by id: the same order whatever the labels
    return out


WARNING_RANK = {"claims_refuted": 0, "claims_unverified": 2}  # other warnings (rules): 1


def _warning_rank(b: Block) -> int:
    """Among warnings: refuted hardware claims, then rule warnings, then unverified claims."""
    return WARNING_RANK.get(b.key[0], 1) if b.warning else 0


def run_diff(a: Source, b: Source, spec: MatrixSpec) -> MatrixDiff:
    ra, rb = _resolve_side(a, spec), _resolve_side(b, spec)
    la = a.label + (f" objective={a.objective}" if a.objective else "")
    lb = b.label + (f" objective={b.objective}" if b.objective else "")
    with paused_gc():  # as while the sides resolved: no collector passes over their results
        return diff_results(spec, ra, rb, la, lb)


def _resolve_side(src: Source, spec: MatrixSpec) -> list[CellResult]:
    """One side: its conf/ (with that tree's conformance and perf data), its overlays, objective and
    rules option (Source.rules, else the matrix's, or the tree's own default)."""
    extra = [f"objective={src.objective}"] if src.objective else []
    side = spec.model_copy(update={"rules": None if src.own_default_rules else (src.rules or spec.rules)})
    return resolve_cells(expand(side, src.overlays), builder=Builder(src.conf_dir, extra), desc=f"diff: {src.label}",
                         evidence=Evidence.load(src.conf_dir))


def diff_overlays(a: Sequence[str], b: Sequence[str], matrix: str | MatrixSpec = "default", conf_dir: Path = CONF_DIR,
                  rules_a: str | None = None, rules_b: str | None = None) -> MatrixDiff:
    """Two overlay sets (and rules options: a release upgrade) of one conf directory (kselect plot,
    tests, notebooks)."""
    spec = matrix if isinstance(matrix, MatrixSpec) else load_matrix(matrix, conf_dir)
    la = f"[{','.join(a)}]" + (f" rules={rules_a}" if rules_a else "")
    lb = f"[{','.join(b)}]" + (f" rules={rules_b}" if rules_b else "")
    return run_diff(Source(la, Path(conf_dir), tuple(a), rules=rules_a), Source(lb, Path(conf_dir), tuple(b), rules=rules_b), spec)
