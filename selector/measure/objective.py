"""Selection by measurement: `objective=latency|throughput|capacity`.

vLLM's rules say which backends are valid; conformance (conf/conformance/<gpu>.yaml) says which
of their kernel paths hardware verified; conf/perf/<gpu>.yaml says how fast each one ran. An
objective chooses, per layer group and per phase, the fastest candidate that is valid AND
verified, at the operating point of conf/objective/<name>.yaml, from the measured bucket nearest
the group's shape (selector/evidence/perf_data.py). It never chooses an unverified kernel, and never guesses:
a candidate without a covering measurement is left out with a warning; a group with none keeps
vLLM's choice.

How: every combination of per-group backends is resolved by the rules themselves, as per-group
pins (`attention.backend_per_kind`), so block sizes, page unification, quant-query, descales and
claim checks are exactly what the rules give that combination. The decode kernels fix the cache
layout; each group's prefill backend is then chosen among the backends whose resolution with that
same cache block gives the same KV block and dtype (one paged cache, two kernels; a backend that
cannot read that layout is refused with the reason), and the block may move where a faster prefill
kernel needs it (relayout). Decode and prefill can want different layouts (FA4's FP8 prefill reads
64-token pages, FlashInfer decodes fastest on 16): the objective's request decides between them,
a prefill at the prefill point then `new_tokens` decode steps at the decode point, and the combination
with the least request time (prefill step + new_tokens x decode step, layers x ms) is chosen. Within
`tie` of the fastest, vLLM's priority order decides, so a choice only moves away from vLLM's for a
measured gain. `capacity` first switches a model-dtype cache to FP8 when every group has a verified,
measured FP8 path. Where the model's prefill step, measured as the engine runs it, is host-bound
(conf/perf `steps`: eager steps, or vLLM's piecewise CUDA graphs, which leave attention out), a prefill
call costs at least its measured host time (`host_ms`); in a GPU-bound step (the engine's prefill graphs
for one sequence up to 2,048 tokens) or where no step is measured, only its kernels count.

Here: the search, the request score and the records. A group's figures: selector/measure/figures.py; one
combination as per-group pins: selector/measure/pins.py; prefill over a decode layout and the cache block
that serves both: selector/measure/layout.py.
"""

from __future__ import annotations

from ..evidence.evidence import Evidence
from ..measure.builds import build_rank, selection_builds
from ..base.errors import SelectionError
from ..measure.figures import figure, noise_why, point, verified
from ..measure.layout import Scored, Search, prefill_over_layout, prefill_total
from ..outputs.measured import Figure, PhaseEvidence
from ..measure.pins import asks, priority_of, resolve_pinned, resolved
from ..outputs.records import ObjectiveWarning
from ..rules.resolve import resolved_kv_dtype
from ..rules.rulebook import RuleBook
from ..config.schema import KSelectConfig
from ..outputs.selection import GroupSelection, Selection
from ..config.vocab import FIXED_KINDS, KV_BYTES, MODEL_GROUP


def apply_objective(cfg: KSelectConfig, book: RuleBook, evidence: Evidence) -> Selection:
    """The objective's selection: vLLM's rules resolve every candidate combination (resolve_rules), the
    evidence says which are verified and how fast they ran."""
    faithful = resolve_pinned(cfg, book, evidence, {})  # vLLM's own: the objective is not read
    obj = cfg.objective.name
    notes: list[str] = []
    if obj == "capacity" and not cfg.kv_cache.quantized:
        fp8_cfg = cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"dtype": "fp8"})})
        s8 = search(fp8_cfg, book, evidence)
        if s8.scored:
            gain = KV_BYTES[resolved_kv_dtype(cfg)] / KV_BYTES["fp8_e4m3"]
            errs = _claim_errors(s8.scored[0].sel)
            notes.append(f"capacity: an fp8_e4m3 cache holds {gain:.1f}x the tokens of {resolved_kv_dtype(cfg)} "
                         f"(numerics cost, max rel err vs the fp32 reference in conformance: {errs})")
            cfg, faithful = fp8_cfg, resolve_pinned(fp8_cfg, book, evidence, {})
        else:
            notes.append(f"capacity: kept the {resolved_kv_dtype(cfg)} cache: no verified, measured FP8 path for every group "
                         f"on {cfg.platform.gpu_model or cfg.platform.name}")
    s = search(cfg, book, evidence)
    return finish(cfg, book, s, faithful, notes)


def search(cfg: KSelectConfig, book: RuleBook, evidence: Evidence) -> Search:
    """Resolve every combination of per-group backends at every cache block the perf runner times
    (selector/measure/reachable.py: the rules' own block first); keep those whose groups are all verified and
    measured at the decode point at the pages they run, scored by the objective's request over that
    layout. Candidates the rules' own block leaves unverified or unmeasured are reported; other
    blocks are alternatives, tried quietly."""
    priority = priority_of(cfg, book)
    faithful = resolve_pinned(cfg, book, evidence, {})  # vLLM's own: the objective is not read
    kinds = [g.kind for g in faithful.groups if not g.draft]
    user_pinned = cfg.attention.backend != "auto"
    free = [] if user_pinned else [k for k in kinds if k not in cfg.attention.backend_per_kind]
    s = Search(cfg, evidence.perf(cfg.platform.gpu_model), evidence, priority, kinds, free)
    seen = _Seen(cfg, book, evidence, lazy=_unscorable(s, faithful))
    raw: list[tuple[dict, tuple, bool, Selection]] = []  # (decode figures per kind, priority rank, own block, selection)
    for pins, rk, block, version in asks(cfg, free, priority):
        if seen.deferred(pins, block, version):
            continue
        sel = resolved(cfg, book, evidence, pins, block, version)
        own = block is None  # the rules' own block for this combination: report what is missing
        if isinstance(sel, SelectionError):
            for k, n in pins.items() if own else ():
                if n in sel.rejected or f"for the {k} group" in str(sel):
                    why = [r.text for r in sel.rejected.get(n, ())] or [str(sel).splitlines()[0]]
                    s.out(k, n, "not valid: " + "; ".join(why))
            continue
        for var in (sel, *selection_builds(cfg, sel, evidence)):  # and on other installed kernel builds (selector/measure/builds.py)
            if not seen.first(var):
                continue
            figs = _decode_figures(s, [g for g in var.groups if not g.draft], report=own)
            if figs is not None:
                raw.append((figs, (*rk, build_rank(var)), own, var))
    # per group, every candidate within `tie` of that group's fastest counts as the fastest; then the
    # request total decides, and equal totals go to vLLM's priority order (the rules' own block first)
    d_eff = _snapped([figs for figs, _, _, _ in raw], cfg.objective.tie)
    p_eff = _snapped([prefill_total(cfg, book, s, sel) for *_, sel in raw], cfg.objective.tie)
    s.scored = [Scored(decode=d, prefill=p, rank=rk, sel=sel, own_block=own)
                for (_, rk, own, sel), d, p in zip(raw, d_eff, p_eff)]
    n = cfg.objective.new_tokens
    s.scored.sort(key=lambda c: (round(c.request(n), 9), round(c.decode, 9), c.rank, not c.own_block))
    return s


def _unscorable(s: Search, faithful: Selection) -> bool:
    """No combination can be scored: the GPU has no perf data and every combination has a group to time. A pinned
    block is then the resolution's cache block, unless a mamba state grows it (resolve._cache_block_size)."""
    groups = [g for g in faithful.groups if not g.draft]
    return s.data is None and bool(groups) and not any(g.kind in FIXED_KINDS for g in groups)


class _Seen:
    """The combinations already scored, by what scoring reads (cache block, each group's kernel and blocks): a
    duplicate (an FA3 pin the rules upgrade to FA4 everywhere, or a block the rules already chose) is skipped.

    `lazy` (nothing can be scored): a combination over another block than the rules' own one matters only as a
    duplicate that hides a later own-block combination's report, so it is resolved only when an own-block
    combination over that same cache block asks; the answer is the one resolving all in order gives."""

    def __init__(self, cfg: KSelectConfig, book: RuleBook, evidence: Evidence, lazy: bool) -> None:
        self.ask, self.lazy = (cfg, book, evidence), lazy
        self.keys: set[tuple] = set()
        self.pending: dict[int, list[tuple]] = {}  # block -> (pins, FlashAttention version) not yet resolved, in order

    def deferred(self, pins: dict[str, str], block: int | None, version: int | None) -> bool:
        if not self.lazy or block is None:
            return False
        self.pending.setdefault(block, []).append((pins, version))
        return True

    def first(self, var: Selection) -> bool:
        """var is no duplicate of an earlier combination (and is now kept as seen)."""
        key = _seen_key(var)
        if self.lazy:
            self._resolve_pending(key[0])
        if key in self.keys:
            return False
        self.keys.add(key)
        return True

    def _resolve_pending(self, block: int) -> None:
        cfg, book, evidence = self.ask
        for pins, version in self.pending.pop(block, ()):
            sel = resolved(cfg, book, evidence, pins, block, version)
            if not isinstance(sel, SelectionError):
                self.keys.update(_seen_key(v) for v in (sel, *selection_builds(cfg, sel, evidence)))


def _seen_key(var: Selection) -> tuple:
    return (var.block_size, *((g.label, g.kernel_block_size, g.kv_block_size) for g in var.groups if not g.draft))


def _decode_figures(s: Search, groups: list[GroupSelection], report: bool) -> dict | None:
    """Per group (ms, layers, backend) of its decode figure at the page it runs; None when a group is not
    verified or not measured (said in the trace when `report`)."""
    figs, ok = {}, True
    for g in groups:
        if not verified(g):
            if report:
                bad = [c.claim for c in g.claims if c.status != "verified"] or ["no claims checked"]
                s.out(g.kind, g.label, f"not verified on {s.cfg.platform.gpu_model or s.cfg.platform.name}: {', '.join(bad)}")
            ok = False
            continue
        f = figure(s.data, g, s.cfg, "decode")
        if f is None:
            if report:
                s.no_data(g, "decode")
            ok = False
            continue
        s.timed(g.kind, "decode", f)
        figs[g.kind] = (f.ms, len(g.layers), g.label)
    return figs if ok else None


def _snapped(per_combo: list[dict], tie: float) -> list[float]:
    """Step totals (sum of layers x ms) per combination, where a group's figure within `tie` of that
    group's fastest over all combinations counts as the fastest; inf when a group has no figure."""
    best: dict[str, float] = {}
    for figs in per_combo:
        for k, (ms, _, _) in (figs or {}).items():
            best[k] = min(best.get(k, ms), ms)
    return [sum((best[k] if ms <= best[k] * (1 + tie) else ms) * n for k, (ms, n, _) in figs.items())
            if figs is not None else float("inf") for figs in per_combo]


def finish(cfg: KSelectConfig, book: RuleBook, s: Search, faithful: Selection, notes: list[str]) -> Selection:
    obj = cfg.objective.name
    where = cfg.platform.gpu_model or cfg.platform.name
    sel_warnings = list(faithful.warnings)
    if not s.free:
        sel_warnings.append(ObjectiveWarning(code="objective_all_pinned", group=MODEL_GROUP, objective=obj))
        chosen = faithful
    elif not s.scored:
        sel_warnings.append(ObjectiveWarning(code="objective_kept_vllm", group=MODEL_GROUP, objective=obj, gpu=where))
        chosen = faithful
    else:
        chosen = s.scored[0].sel
        notes.extend(x for x in (_layout_note(s), _request_note(cfg, s)) if x)
    groups = []
    for g in chosen.groups:
        if g.draft or g.kind not in s.free:
            groups.append(g)
            continue
        fg = next(x for x in faithful.groups if x.kind == g.kind and not x.draft)
        dec = _decode_evidence(cfg, s, g, fg)
        pre_g, pre = prefill_over_layout(cfg, book, s, chosen, g, fg)
        warns = [*s.unmeasured.get(g.kind, {}).values(), *s.mixed_timing(g.kind), *s.other_version(g.kind)]
        refused = [f"objective {obj}: {k} {why}" for k, why in s.left_out.get("prefill:" + g.kind, {}).items()]
        trace = [f"objective.{obj}:decode", f"objective.{obj}:prefill"]
        not_chosen = [f"objective {obj}: {_other_build(k, g)} not chosen: {why}"
                      for k, why in s.left_out.get(g.kind, {}).items() if k != g.label]
        reasons = [*notes, dec.text(), pre.text(), *refused, *not_chosen]
        own_pin = f"{g.backend} pinned by attention.backend_per_kind.{g.kind}"
        base = tuple(f"{g.label} chosen by objective {obj} among the valid, verified, measured candidates "
                     f"(resolved as a per-group pin: validated alone)" if r.startswith(own_pin) else r for r in g.reasons)
        groups.append(g.model_copy(update={
            "trace": g.trace + tuple(trace), "reasons": base + tuple(reasons),
            "warnings": g.warnings + tuple(warns), "measured": (pre, dec),
            "prefill": pre_g if pre_g is not None and pre_g.label != g.label else None}))
    env = {**chosen.environment, "objective": obj}
    return chosen.model_copy(update={"groups": tuple(groups), "environment": env, "warnings": tuple(sel_warnings),
                                     "trace": chosen.trace + (f"objective.{obj}",), **_vllm_kernels(cfg, s, chosen)})


def _vllm_kernels(cfg: KSelectConfig, s: Search, chosen: Selection) -> dict:
    """Where the choice decodes on a build vLLM does not ship: the best scored choice made of vLLM's own kernels
    (what output=vllm exports instead), and both request times."""
    if not any(g.build for g in chosen.groups if not g.draft) or not s.scored:
        return {}
    n = cfg.objective.new_tokens
    alt = next((c for c in s.scored if not any(g.build for g in c.sel.groups if not g.draft)), None)
    return {"request_ms": s.scored[0].request(n),
            "vllm_kernels": alt.sel.model_copy(update={"request_ms": alt.request(n)}) if alt else None}


def _other_build(label: str, g: GroupSelection) -> str:
    """A left-out candidate named so it cannot read as the chosen kernel: vLLM's own build of the chosen backend."""
    return f"{label} (vLLM's build; this group runs {g.label})" if label == g.backend and g.label != label else label


def _layout_note(s: Search) -> str:
    """Where the chosen kernels run over another cache block than the rules give them by default."""
    win = s.scored[0]
    if win.own_block:
        return ""
    labels = [g.label for g in win.sel.groups if not g.draft]
    own = next((c for c in s.scored if c.own_block and [g.label for g in c.sel.groups if not g.draft] == labels), None)
    if own is None:
        return f"cache block {win.sel.block_size} set by the objective (kv_cache.block_size)"
    return (f"cache block {own.sel.block_size} -> {win.sel.block_size}: the same kernels over this block serve the request "
            f"faster (prefill step, all layers: {own.prefill:.4g} -> {win.prefill:.4g} ms; decode step {own.decode:.4g} -> "
            f"{win.decode:.4g} ms)")


def _request_note(cfg, s: Search) -> str:
    """Why this layout: the request it serves, and what the best combination of another layout would cost."""
    n, win = cfg.objective.new_tokens, s.scored[0]
    if win.prefill == float("inf"):
        return ""
    head = (f"request ({point(cfg, 'prefill')} prefill + {n} decode steps at {point(cfg, 'decode')}): "
            f"{win.request(n):.4g} ms of attention (prefill {win.prefill:.4g} + {n} x decode {win.decode:.4g})")
    pages = lambda c: [(g.kind, g.kernel_block_size) for g in c.sel.groups if not g.draft]  # noqa: E731
    other = next((c for c in s.scored[1:] if pages(c) != pages(win) and c.prefill != float("inf")), None)
    if other is None:
        return head
    kernels = ", ".join(f"{g.kind} {g.label}" for g in other.sel.groups if not g.draft)
    return (f"{head}; the best over cache block {other.sel.block_size} ({kernels}): {other.request(n):.4g} ms "
            f"(prefill {other.prefill:.4g} + {n} x decode {other.decode:.4g})")


def _others(s: Search, kind: str, phase: str, chosen_label: str) -> list[Figure]:
    """Every other verified, measured backend's figure for this group (from the scored combinations)."""
    seen: dict[str, Figure] = {}
    for c in s.scored:
        g = next(x for x in c.sel.groups if x.kind == kind and not x.draft)
        if g.label != chosen_label and g.label not in seen:
            f = figure(s.data, g, s.cfg, phase)
            if f:
                seen[g.label] = f
    return sorted(seen.values(), key=lambda f: f.ms)


def _decode_evidence(cfg, s: Search, g: GroupSelection, fg: GroupSelection) -> PhaseEvidence:
    obj = cfg.objective.name
    f = figure(s.data, g, cfg, "decode") if s.scored else None
    others = _others(s, g.kind, "decode", g.label)
    vf = figure(s.data, fg, cfg, "decode") if fg.label != g.label else None
    if f is None:
        why = "kept vLLM's choice: no valid, verified, measured alternative"
    elif others and others[0].ms < f.ms:
        why = noise_why(cfg, f, others[0], "vLLM's priority order decides")
    else:
        why = "fastest verified candidate"
    return PhaseEvidence(phase="decode", objective=obj, point=point(cfg, "decode"), backend=g.label, chosen=f,
                         runner_up=others[0] if others else None, vllm=vf, others=tuple(others), why=why)


def _claim_errors(sel: Selection) -> str:
    out = []
    for g in (g for g in sel.groups if not g.draft):
        errs = [c.rel_err for c in g.claims if c.rel_err is not None]
        out.append(f"{g.kind} {g.label} {max(errs):.2g}" if errs else f"{g.kind} {g.label} n/a")
    return ", ".join(out)
