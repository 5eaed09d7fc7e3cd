"""Selection by measurement: `objective=latency|throughput|capacity`.

vLLM's rules say which backends are valid; conformance (conf/conformance/<gpu>.yaml) says which
of their kernel paths hardware verified; conf/perf/<gpu>.yaml says how fast each one ran. An
objective chooses, per layer group and per phase, the fastest candidate that is valid AND
verified, at the operating point of conf/objective/<name>.yaml, from the measured bucket nearest
the group's shape (selector/perf.py). It never chooses an unverified kernel, and never guesses:
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
measured FP8 path. Prefill runs eagerly (the engine; vLLM's piecewise CUDA graphs leave attention
out): where the model's measured prefill step is host-bound (conf/perf `steps`), a prefill call costs
at least its measured host time (`host_ms`); in a GPU-bound step only its kernels count.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

from . import perf
from .errors import SelectionError
from .measured import Figure, PhaseEvidence, StepFigure
from .records import ObjectiveWarning
from .resolve import base_facts, resolve, resolved_kv_dtype
from .rulebook import RuleBook
from .schema import KSelectConfig
from .selection import GroupSelection, Selection
from .vocab import KV_BYTES, MODEL_GROUP, claim_dtype, path_id


def label(g: GroupSelection) -> str:
    return g.backend + (f" v{g.flash_attn_version}" if g.flash_attn_version else "")


def kv_tag(g: GroupSelection, model_dtype: str) -> str:
    return claim_dtype(g.kv_cache_dtype, model_dtype)


def verified(g: GroupSelection) -> bool:
    return bool(g.claims) and all(c.status == "verified" for c in g.claims)


def entry(data, g: GroupSelection, cfg: KSelectConfig, phase: str) -> perf.PerfEntry | None:
    """The measured bucket nearest group g's shape at the objective's operating point for this phase."""
    pt = getattr(cfg.objective, phase)
    return perf.nearest(data, path_id(g.backend, g.flash_attn_version), kv_tag(g, cfg.model.dtype), g.head_size,
                        g.sliding_window, phase, pt.batch, pt.context, g.num_kv_heads)


def figure(data, g: GroupSelection, cfg: KSelectConfig, phase: str) -> Figure | None:
    """Group g's measured time per layer call. Prefill runs eagerly: where the model's measured prefill
    step at this point is host-bound (perf.StepEntry), a call costs at least its host time."""
    e = entry(data, g, cfg, phase)
    if e is None:
        return None
    host = e.host_ms if phase == "prefill" and e.host_ms and e.host_ms > e.ms and host_bound(data, cfg) else None
    return Figure(backend=label(g), ms=host or e.ms, bucket=e.bucket, kernel_ms=e.ms if host else None)


def host_bound(data, cfg: KSelectConfig) -> bool:
    st = step_figure(data, cfg)
    return st is not None and st.host_bound


def step_figure(data, cfg: KSelectConfig) -> StepFigure | None:
    pt = cfg.objective.prefill
    st = perf.nearest_step(data, cfg.model.name, "prefill", pt.batch, pt.context)
    return StepFigure(step=st.key, wall_ms=st.wall_ms, kernel_ms=st.kernel_ms, host_bound=st.host_bound) if st else None


def point(cfg: KSelectConfig, phase: str) -> str:
    pt = getattr(cfg.objective, phase)
    return f"B{pt.batch} x {pt.context}"


@dataclass
class Scored:
    """One valid, verified, measured combination of per-group decode kernels, over its best layout."""

    decode: float  # decode step, all layers (layers x ms; within `tie` of a group's fastest counts as the fastest)
    prefill: float  # prefill step over this layout, all layers (inf: a group's prefill is not measured)
    rank: tuple  # vLLM's priority order of the combination
    sel: Selection  # after relayout
    note: str = ""  # what relayout did, or why it did not

    def request(self, new_tokens: int) -> float:
        """A request's attention time: one prefill, then new_tokens decode steps."""
        return self.prefill + new_tokens * self.decode


@dataclass
class Search:
    """What the search saw for one config: per kind, per backend name, why it was left out."""

    cfg: KSelectConfig
    data: perf.PerfFile | None
    priority: list[str]
    kinds: list[str]
    free: list[str]  # kinds the objective may choose (not pinned by the user)
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> backend -> why (a reason)
    unmeasured: dict[str, dict[str, ObjectiveWarning]] = field(default_factory=dict)  # kind -> backend -> warning
    scored: list[Scored] = field(default_factory=list)  # best request first
    refused_blocks: set[int] = field(default_factory=set)  # kv blocks of prefill kernels refused for layout

    def out(self, kind: str, name: str, why: str) -> None:
        self.left_out.setdefault(kind, {}).setdefault(name, why)

    def no_data(self, g: GroupSelection, phase: str) -> None:
        shape = (f"{point(self.cfg, phase)} (d{g.head_size}, {kv_tag(g, self.cfg.model.dtype)}, "
                 f"{g.num_kv_heads} KV heads{f', window {g.sliding_window}' if g.sliding_window else ''})")
        w = ObjectiveWarning(code="objective_no_measurement", group=g.kind, objective=self.cfg.objective.name,
                             backend=label(g), phase=phase, shape=shape)
        self.unmeasured.setdefault(g.kind, {}).setdefault(f"{phase}:{label(g)}", w)


def apply_objective(cfg: KSelectConfig, book: RuleBook) -> Selection:
    faithful_cfg = with_objective(cfg, "vllm")
    faithful = resolve(faithful_cfg, book)
    obj = cfg.objective.name
    notes: list[str] = []
    if obj == "capacity" and not cfg.kv_cache.quantized:
        fp8_cfg = cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"dtype": "fp8"})})
        s8 = search(fp8_cfg, book)
        if s8.scored:
            gain = KV_BYTES[resolved_kv_dtype(cfg)] / KV_BYTES["fp8_e4m3"]
            errs = _claim_errors(s8.scored[0].sel)
            notes.append(f"capacity: an fp8_e4m3 cache holds {gain:.1f}x the tokens of {resolved_kv_dtype(cfg)} "
                         f"(numerics cost, max rel err vs the fp32 reference in conformance: {errs})")
            cfg, faithful = fp8_cfg, resolve(with_objective(fp8_cfg, "vllm"), book)
        else:
            notes.append(f"capacity: kept the {resolved_kv_dtype(cfg)} cache: no verified, measured FP8 path for every group "
                         f"on {cfg.platform.gpu_model or cfg.platform.name}")
    s = search(cfg, book)
    return finish(cfg, book, s, faithful, notes)


def with_objective(cfg: KSelectConfig, name: str) -> KSelectConfig:
    return cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"name": name})})


def pinned(cfg: KSelectConfig, kinds: dict[str, str], block: int | None = None, fa_version: int | None = None) -> KSelectConfig:
    """cfg with per-group backend pins (and a global FlashAttention version, as vLLM's
    attention_config.flash_attn_version: head-512 layers are still upgraded to FA4 by the rules)."""
    att = {"backend_per_kind": {**cfg.attention.backend_per_kind, **kinds}}
    if fa_version is not None:
        att["flash_attn_version"] = fa_version
    att = cfg.attention.model_copy(update=att)
    upd = {"attention": att, "objective": cfg.objective.model_copy(update={"name": "vllm"})}
    if block is not None:
        upd["kv_cache"] = cfg.kv_cache.model_copy(update={"block_size": block})
    return cfg.model_copy(update=upd)


def choices(cfg: KSelectConfig, priority: list[str]) -> list[tuple[str, int | None]]:
    """Per-group candidates: vLLM's priority list, plus FlashAttention 3 where the user did not pin a
    version and FA3 is installed. vLLM's attention_config.flash_attn_version=3 is a valid pin for
    Gemma-4 (only head-512 layers are then upgraded to FA4); without it, the Gemma-4 rule forces FA4
    on every layer of a bf16 model, so FA3 would never be measured against the others."""
    out = [(n, None) for n in priority]
    if "FLASH_ATTN" in priority and cfg.attention.flash_attn_version is None and cfg.platform.packages.fa3:
        out.insert(priority.index("FLASH_ATTN") + 1, ("FLASH_ATTN", 3))
    return out


def fa_pin(combo) -> int | str | None:
    """The global FlashAttention version a combination needs: 3 when a group picks FA3; "mixed" when
    another group picks FLASH_ATTN at vLLM's default version (not expressible as one setting)."""
    versions = {v for n, v in combo if n == "FLASH_ATTN"}
    return "mixed" if versions == {None, 3} else 3 if 3 in versions else None


def rank(priority: list[str], choice: tuple[str, int | None]) -> float:
    """vLLM's priority order; FA3 right after vLLM's own FlashAttention version (ties keep vLLM's)."""
    return priority.index(choice[0]) + (0.5 if choice[1] else 0.0)


def search(cfg: KSelectConfig, book: RuleBook) -> Search:
    """Resolve every combination of per-group backends; keep those whose groups are all verified and
    measured at the decode point, scored by sum(layers x ms)."""
    prio = book.matching("priority", base_facts(cfg))
    priority = list(prio[-1].rule.priority) if prio else []
    faithful = resolve(with_objective(cfg, "vllm"), book)
    kinds = [g.kind for g in faithful.groups if not g.draft]
    user_pinned = cfg.attention.backend != "auto"
    free = [] if user_pinned else [k for k in kinds if k not in cfg.attention.backend_per_kind]
    s = Search(cfg, perf.load(cfg.platform.gpu_model) if cfg.platform.gpu_model else None, priority, kinds, free)
    seen: set[tuple] = set()
    for combo in itertools.product(*(choices(cfg, priority) for _ in free)):
        pins = {k: n for k, (n, _) in zip(free, combo)}
        version = fa_pin(combo)
        if version == "mixed":
            continue  # one global FlashAttention version: FA3 and vLLM's default version cannot both be pinned
        try:
            sel = resolve(pinned(cfg, pins, fa_version=version), book) if pins else faithful
        except SelectionError as e:
            for k, n in pins.items():
                if n in e.rejected or f"for the {k} group" in str(e):
                    why = [r.text for r in e.rejected.get(n, ())] or [str(e).splitlines()[0]]
                    s.out(k, n, "not valid: " + "; ".join(why))
            continue
        figs, ok = {}, True
        for g in (g for g in sel.groups if not g.draft):
            if not verified(g):
                bad = [c.claim for c in g.claims if c.status != "verified"] or ["no claims checked"]
                s.out(g.kind, label(g), f"not verified on {cfg.platform.gpu_model or cfg.platform.name}: {', '.join(bad)}")
                ok = False
                continue
            f = figure(s.data, g, cfg, "decode")
            if f is None:
                s.no_data(g, "decode")
                ok = False
                continue
            figs[g.kind] = (f.ms, len(g.layers), label(g))
        labels = tuple(label(g) for g in sel.groups if not g.draft)
        if ok and labels not in seen:  # an FA3 pin that the rules upgrade to FA4 everywhere is a duplicate
            seen.add(labels)
            s.scored.append((figs, tuple(rank(priority, c) for c in combo), sel))
    # per group, every candidate within `tie` of that group's fastest counts as the fastest; then the
    # request total decides, and equal totals go to vLLM's priority order
    raw = s.scored
    s.scored = []
    d_eff = _snapped([figs for figs, _, _ in raw], cfg.objective.tie)
    pre = [_layout(cfg, book, s, sel) for _, _, sel in raw]
    p_eff = _snapped([p for _, p, _ in pre], cfg.objective.tie)
    for (_, rk, _), d, (sel, _, note), p in zip(raw, d_eff, pre, p_eff):
        s.scored.append(Scored(decode=d, prefill=p, rank=rk, sel=sel, note=note))
    n = cfg.objective.new_tokens
    s.scored.sort(key=lambda c: (round(c.request(n), 9), round(c.decode, 9), c.rank))
    return s


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
        notes.extend(x for x in (s.scored[0].note, _request_note(cfg, s)) if x)
    groups = []
    for g in chosen.groups:
        if g.draft or g.kind not in s.free:
            groups.append(g)
            continue
        fg = next(x for x in faithful.groups if x.kind == g.kind and not x.draft)
        dec = _decode_evidence(cfg, s, g, fg)
        pre_g, pre = _prefill(cfg, book, s, chosen, g, fg)
        warns = list(s.unmeasured.get(g.kind, {}).values())
        refused = [f"objective {obj}: {k} {why}" for k, why in s.left_out.get("prefill:" + g.kind, {}).items()]
        trace = [f"objective.{obj}:decode", f"objective.{obj}:prefill"]
        not_chosen = [f"objective {obj}: {k} not chosen: {why}" for k, why in s.left_out.get(g.kind, {}).items()
                      if k != label(g)]
        reasons = [*notes, dec.text(), pre.text(), *refused, *not_chosen]
        own_pin = f"{g.backend} pinned by attention.backend_per_kind.{g.kind}"
        base = tuple(f"{g.backend} chosen by objective {obj} among the valid, verified, measured candidates "
                     f"(resolved as a per-group pin: validated alone)" if r.startswith(own_pin) else r for r in g.reasons)
        groups.append(g.model_copy(update={
            "trace": g.trace + tuple(trace), "reasons": base + tuple(reasons),
            "warnings": g.warnings + tuple(warns), "measured": (pre, dec),
            "prefill": pre_g if pre_g is not None and label(pre_g) != label(g) else None}))
    env = {**chosen.environment, "objective": obj}
    return chosen.model_copy(update={"groups": tuple(groups), "environment": env, "warnings": tuple(sel_warnings),
                                     "trace": chosen.trace + (f"objective.{obj}",)})


def _request_note(cfg, s: Search) -> str:
    """Why this layout: the request it serves, and what the best combination of another layout would cost."""
    n, win = cfg.objective.new_tokens, s.scored[0]
    if win.prefill == float("inf"):
        return ""
    head = (f"request ({point(cfg, 'prefill')} prefill + {n} decode steps at {point(cfg, 'decode')}): "
            f"{win.request(n):.4g} ms of attention (prefill {win.prefill:.4g} + {n} x decode {win.decode:.4g})")
    other = next((c for c in s.scored[1:] if c.sel.block_size != win.sel.block_size
                  and c.prefill != float("inf")), None)
    if other is None:
        return head
    kernels = ", ".join(f"{g.kind} {label(g)}" for g in other.sel.groups if not g.draft)
    return (f"{head}; the best over cache block {other.sel.block_size} ({kernels}): {other.request(n):.4g} ms "
            f"(prefill {other.prefill:.4g} + {n} x decode {other.decode:.4g})")


def _others(s: Search, kind: str, phase: str, chosen_label: str) -> list[Figure]:
    """Every other verified, measured backend's figure for this group (from the scored combinations)."""
    seen: dict[str, Figure] = {}
    for c in s.scored:
        g = next(x for x in c.sel.groups if x.kind == kind and not x.draft)
        if label(g) != chosen_label and label(g) not in seen:
            f = figure(s.data, g, s.cfg, phase)
            if f:
                seen[label(g)] = f
    return sorted(seen.values(), key=lambda f: f.ms)


def _decode_evidence(cfg, s: Search, g: GroupSelection, fg: GroupSelection) -> PhaseEvidence:
    obj = cfg.objective.name
    f = figure(s.data, g, cfg, "decode") if s.scored else None
    others = _others(s, g.kind, "decode", label(g))
    vf = figure(s.data, fg, cfg, "decode") if label(fg) != label(g) else None
    if f is None:
        why = "kept vLLM's choice: no valid, verified, measured alternative"
    elif others and others[0].ms < f.ms:
        why = f"within {cfg.objective.tie:.0%} of the fastest: vLLM's priority order decides"
    else:
        why = "fastest verified candidate"
    return PhaseEvidence(phase="decode", objective=obj, point=point(cfg, "decode"), backend=label(g), chosen=f,
                         runner_up=others[0] if others else None, vllm=vf, others=tuple(others), why=why)


def _prefill(cfg, book, s: Search, chosen: Selection, g: GroupSelection, fg: GroupSelection):
    """The prefill backend of group g over g's cache layout (same KV block and dtype)."""
    obj = cfg.objective.name
    pins = {x.kind: x.backend for x in chosen.groups if not x.draft and x.kind in s.free}
    cands: list[tuple[float, float, GroupSelection, Figure]] = []
    tried: set[str] = set()
    for name, version in choices(cfg, s.priority):
        others = {x.flash_attn_version for x in chosen.groups if not x.draft and x.kind != g.kind and x.backend == "FLASH_ATTN"}
        glob = version if version else (3 if 3 in others and name != "FLASH_ATTN" else None)
        try:
            sel = resolve(pinned(cfg, {**pins, g.kind: name}, chosen.block_size, fa_version=glob), book)
        except SelectionError:  # not valid at this cache block: remember the block it wants (relayout)
            with contextlib.suppress(SelectionError):
                s.refused_blocks.add(resolve(pinned(cfg, {**pins, g.kind: name}, None, fa_version=glob), book).block_size)
            continue
        p = next(x for x in sel.groups if x.kind == g.kind and not x.draft)
        if label(p) in tried:
            continue
        tried.add(label(p))
        if (p.kv_block_size, p.kv_cache_dtype) != (g.kv_block_size, g.kv_cache_dtype):
            s.refused_blocks.add(p.kv_block_size)
            s.out("prefill:" + g.kind, label(p), f"refused for prefill: its layout (kv block {p.kv_block_size}, "
                  f"{p.kv_cache_dtype}) differs from the decode cache (kv block {g.kv_block_size}, {g.kv_cache_dtype})")
            continue
        if not verified(p):
            continue
        f = figure(s.data, p, cfg, "prefill")
        if f is None:
            s.no_data(p, "prefill")
            continue
        same = 0 if label(p) == label(g) else 1
        cands.append((f.ms, same * 1000 + rank(s.priority, (name, version)), p, f))
    if not cands or not cfg.objective.per_phase:
        f = figure(s.data, g, cfg, "prefill")
        why = "per_phase off: prefill on the decode backend" if cands else "no verified, measured prefill alternative: the decode backend"
        return None, PhaseEvidence(phase="prefill", objective=obj, point=point(cfg, "prefill"), backend=label(g),
                                   chosen=f, why=why, step=step_figure(s.data, cfg))
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= best * (1 + cfg.objective.tie)]
    ms, _, p, f = min(near, key=lambda c: c[1])  # ties: the decode backend (one kernel), then priority
    others = sorted((c[3] for c in cands if label(c[2]) != label(p)), key=lambda x: x.ms)
    vf = figure(s.data, fg, cfg, "prefill") if label(fg) != label(p) else None
    why = "fastest verified over the decode cache layout" if ms == best else \
        f"within {cfg.objective.tie:.0%} of the fastest: the decode backend / priority order decides"
    ev = PhaseEvidence(phase="prefill", objective=obj, point=point(cfg, "prefill"), backend=label(p), chosen=f,
                       runner_up=others[0] if others else None, vllm=vf, others=tuple(others), why=why,
                       step=step_figure(s.data, cfg))
    clean = p.model_copy(update={"measured": (), "prefill": None})
    return clean, ev


def _prefill_total(cfg, book, s: Search, sel: Selection) -> tuple[dict | None, set[int]]:
    """Per free group (layers x ms) of the fastest prefill over sel's cache layout (None: a group has no
    measured prefill), and the kv blocks of faster kernels that layout refused; side-effect free."""
    scratch = Search(s.cfg, s.data, s.priority, s.kinds, s.free)
    figs: dict = {}
    for g in (x for x in sel.groups if not x.draft and x.kind in s.free):
        _, ev = _prefill(cfg, book, scratch, sel, g, g)
        if ev.chosen is None:
            return None, scratch.refused_blocks
        figs[g.kind] = (ev.chosen.ms, len(g.layers), ev.backend)
    return figs, scratch.refused_blocks


def _total(figs: dict | None) -> float:
    return sum(ms * n for ms, n, _ in figs.values()) if figs is not None else float("inf")


def _layout(cfg, book, s: Search, chosen: Selection) -> tuple[Selection, dict | None, str]:
    """The decode choice fixes the kernels, not the cache block: where a prefill kernel was refused
    only because it reads another kv block, resolve the same decode kernels at a block that gives it
    that layout. Kept when every group still resolves to the same, verified decode kernels, no decode
    kernel moves off the page its figure was measured at (_unmeasured_pages), and the prefill step
    total drops by more than `tie`. Returns the selection, its prefill figures and a note."""
    figs, blocks = _prefill_total(cfg, book, s, chosen)
    if not cfg.objective.per_phase:
        return chosen, figs, ""
    best = _total(figs)
    first, note = chosen.block_size, ""
    free = [x for x in chosen.groups if not x.draft and x.kind in s.free]
    pins = {x.kind: x.backend for x in free}
    version = 3 if any(x.backend == "FLASH_ATTN" and x.flash_attn_version == 3 for x in free) else None
    want = [(x.kind, label(x)) for x in chosen.groups if not x.draft]
    refused: list[str] = []
    # the refused kernel's own cache block, and multiples: page unification may give this group a
    # smaller kv block than the cache block (a group with smaller pages per token)
    for block in sorted({b * m for b in blocks for m in (1, 2, 4) if b * m <= 512} - {chosen.block_size}):
        try:
            alt = resolve(pinned(cfg, pins, block, version), book)
        except SelectionError:
            continue
        if [(x.kind, label(x)) for x in alt.groups if not x.draft] != want or not all(
                verified(x) for x in alt.groups if not x.draft and x.kind in s.free):
            continue
        moved = _unmeasured_pages(s, chosen, alt)
        if moved:
            refused.append(f"cache block {alt.block_size} not taken for a faster prefill: it moves {moved}")
            continue
        alt_figs, _ = _prefill_total(cfg, book, s, alt)
        total = _total(alt_figs)
        if total < best * (1 - cfg.objective.tie):
            note = (f"cache block {chosen.block_size} -> {alt.block_size}: the same decode kernels over this block let a "
                    f"faster prefill kernel read the decode cache (prefill step, all layers: {best:.4g} -> {total:.4g} ms)")
            chosen, best, figs = alt, total, alt_figs
    if chosen.block_size == first:
        note = refused[0] if refused else ""  # the smallest block tried; the others move the same groups
    return chosen, figs, note


def _unmeasured_pages(s: Search, before: Selection, after: Selection) -> str:
    """The decode groups a relayout moves to a kernel page their decode figure was not measured at
    ('' when none). A decode kernel's speed depends on its page (FlashInfer decoded 6% slower end to
    end over 64-token pages than over the 16-token pages it was measured at, bench/results/h200/
    objective_at_run/), so the layout may keep a group's page or move it to the measured one, no other."""
    was = {g.kind: g.kernel_block_size for g in before.groups if not g.draft}
    out = []
    for g in (x for x in after.groups if not x.draft and x.kind in s.free):
        e = entry(s.data, g, s.cfg, "decode")
        if g.kernel_block_size != was.get(g.kind) and (e is None or e.page != g.kernel_block_size):
            out.append(f"{g.kind} {label(g)} (page {was.get(g.kind)} -> {g.kernel_block_size}, measured at "
                       f"{e.page if e else 'no page'})")
    return ", ".join(out)


def _claim_errors(sel: Selection) -> str:
    out = []
    for g in (g for g in sel.groups if not g.draft):
        errs = [c.rel_err for c in g.claims if c.rel_err is not None]
        out.append(f"{g.kind} {label(g)} {max(errs):.2g}" if errs else f"{g.kind} {label(g)} n/a")
    return ", ".join(out)
