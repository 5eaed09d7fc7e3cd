"""`resolve_rules(cfg, book, evidence)`: faithful resolution, a validated config -> a `Selection` per
KV-cache layer group, as vLLM's rules give it. It never calls the objective (selector/measure/objective.py
calls it; selector/measure/select.py chooses between the two); `evidence` (selector/evidence/evidence.py)
marks each group's claims as hardware verified them.

The order follows vLLM's: model-level forcing, FlashAttention version per group, backend
priority with every candidate validated (reasons kept), an explicit pin validated alone
with no fallback, kernel block sizes, preferred block size, sliding-window block, page-size
unification, kernel block per group, quant-query, FP8 descales, MTP draft groups, warnings.
Steps that are engine mechanics (not rules) appear in traces as `builtin.*`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial

from . import blocks as blk
from . import drafts as dr
from ..base.errors import SelectionError
from ..config.schema import KSelectConfig
from ..config.vocab import FIXED_KINDS, KV_BYTES, MODEL_GROUP, group_id, is_fp8, token_bytes
from ..evidence.conformance_data import ConformanceFile, claim_checks
from ..evidence.evidence import Evidence
from ..outputs.records import Failure, OrphanRule, RuleWarning, SettingIgnored, rejection
from ..outputs.selection import GroupSelection, Selection
from .candidates import Choice, choose_backend
from .checkpoint import checkpoint_kv_checks, kv_dtype_source, kv_scales
from .facts import Facts, base_facts, resolved_kv_dtype  # noqa: F401 - resolve's public names
from .groups import Group, target_groups
from .kept import Kept
from .rulebook import RuleBook, rulebook


@dataclass(frozen=True)
class Resolution:
    """What every step of one resolution reads: the config, its rules, the model-level facts (after the
    model forcing and the `spec` stage), the resolved KV dtype and the GPU's conformance records."""

    cfg: KSelectConfig
    book: RuleBook
    facts: Facts
    kv_dtype: str
    conformance: ConformanceFile | None
    kept: Kept = field(default_factory=Kept, compare=False)  # the prelude's: what its combinations share


@dataclass(frozen=True)
class DraftPlan:
    """The MTP drafter's layer groups, and their own backends under policy `own_selection` (none: each
    runs its target group's backend)."""

    groups: tuple[Group, ...] = ()
    own_choices: tuple[Choice, ...] = ()


@dataclass(frozen=True)
class Prelude:
    """What a resolution derives before any group's backend: it reads no per-group pin
    (`attention.backend_per_kind`), so an objective's search prepares it once per cache block and
    FlashAttention version and resolves every combination of per-group pins from it."""

    kv_cache: object  # the KV section the steps read where vLLM sets the configured dtype aside (else None)
    kv_ignored: tuple
    trace: tuple[str, ...]
    facts: Facts
    kv_dtype: str
    conformance: ConformanceFile | None
    groups: tuple[Group, ...]
    ckv_warnings: tuple
    kept: Kept = field(default_factory=Kept, compare=False, repr=False)  # per-group steps its combinations share (kept.py)


def prelude(cfg: KSelectConfig, book: RuleBook, evidence: Evidence) -> Prelude:
    """The model-level steps: architecture check, KV dtype ignored/forced, forcing, `spec` stage, checkpoint checks."""
    _check_architecture(cfg)
    kv = cfg.kv_cache
    cfg, kv_ignored = _kv_dtype_ignored(cfg)
    cfg, trace = _kv_dtype_forced(cfg)
    facts = _spec_facts(cfg, book, _forced_facts(book, base_facts(cfg), trace), trace)
    kv_dtype, conformance = resolved_kv_dtype(cfg), evidence.conformance(cfg.platform.gpu_model)
    groups = target_groups(cfg)
    ckv_warnings = checkpoint_kv_checks(cfg, [g.kind for g in groups], trace)
    return Prelude(None if cfg.kv_cache is kv else cfg.kv_cache, tuple(kv_ignored), tuple(trace), facts, kv_dtype, conformance, tuple(groups),
                   tuple(ckv_warnings))


def resolve_rules(cfg: KSelectConfig, book: RuleBook, evidence: Evidence, pre: Prelude | None = None) -> Selection:
    """vLLM's selection under `book` (the config's objective is not read here). `pre`: prelude(cfg, book,
    evidence) of a config that differs from cfg at most in its per-group pins."""
    pre = pre or prelude(cfg, book, evidence)
    if pre.kv_cache is not None:
        cfg = cfg.model_copy(update={"kv_cache": pre.kv_cache})
    facts, trace, groups, kept = pre.facts, list(pre.trace), list(pre.groups), pre.kept
    ctx = Resolution(cfg, book, facts, pre.kv_dtype, pre.conformance, kept)
    pins = [cfg.attention.backend_per_kind.get(g.kind) for g in groups]  # what a group's own steps read of the pins
    choices = [kept.choice(("choice", i, pin), partial(choose_backend, cfg, book, facts, g))
               for i, (g, pin) in enumerate(zip(groups, pins))]
    for i, (g, ch, pin) in enumerate(zip(groups, choices, pins)):
        kept.value(("init", i, pin), partial(layer_init_checks, book, g, ch))
    drafts = _plan_drafts(ctx, groups, trace)
    block_size = _cache_block_size(ctx, groups, choices, drafts, trace)
    state_block = getattr(cfg.model, "attention_free_block", lambda: None)()
    kv_blocks = unify_pages(groups, _kv_blocks(book, groups, choices, block_size, state_block), KV_BYTES[ctx.kv_dtype],
                            choices)
    for i, (g, ch, kv_block, pin) in enumerate(zip(groups, choices, kv_blocks, pins)):  # the metadata builders' checks
        if g.kind not in FIXED_KINDS:
            kept.value(("init", i, pin, kv_block), partial(layer_init_checks, book, g, ch, kv_block))
    out = [_finished(ctx, ("group", i, pin), g, ch, kv_block)
           for i, (g, ch, kv_block, pin) in enumerate(zip(groups, choices, kv_blocks, pins))]
    if drafts.groups:
        out.extend(draft_groups(ctx, groups, choices, out, drafts))
    warnings = [OrphanRule(group=MODEL_GROUP, rule=r) for r in book.orphans] + _fa_pin_ignored(cfg, out)
    warnings += list(pre.ckv_warnings) + list(pre.kv_ignored)
    return Selection(environment=_environment(ctx), block_size=block_size, groups=tuple(out),
                     warnings=tuple(warnings), trace=tuple(trace))


def _check_architecture(cfg: KSelectConfig) -> None:
    """A release proven for other architectures only: refused, never guessed."""
    arch = cfg.model.hf_architecture
    if arch not in cfg.architectures:
        raise SelectionError(Failure(code="architecture_not_modelled", model=cfg.model.name, architecture=arch,
                                     rules=cfg.ruleset.name, allowed=", ".join(cfg.architectures)))


def _forced_facts(book: RuleBook, facts: Facts, trace: list[str]) -> Facts:
    """Model-level forcing (Gemma-4 mixed head sizes), written into the effective pins."""
    pin = facts.pin
    for c in book.matching("model", facts):
        if c.rule.set.flash_attn_version is not None:
            pin = replace(pin, flash_attn_version=c.rule.set.flash_attn_version)
        if c.rule.set.backend is not None:
            pin = replace(pin, backend=c.rule.set.backend)
        trace.append(c.id)
    return replace(facts, pin=pin)


def _spec_facts(cfg: KSelectConfig, book: RuleBook, facts: Facts, trace: list[str]) -> Facts:
    """MTP: whether draft layers dequantize with the target's K/V scales (the `spec` stage, then the user's)."""
    copy = False
    if cfg.spec_decode.method == "mtp":
        for c in book.matching("spec", facts):
            copy = c.rule.copy_target_kv_scales
            trace.append(c.id)
        if cfg.spec_decode.copy_target_kv_scales is not None:
            copy = cfg.spec_decode.copy_target_kv_scales
            trace.append("pin.spec_decode.copy_target_kv_scales")
    return replace(facts, spec=replace(facts.spec, copy_target_kv_scales=copy))


def _plan_drafts(ctx: Resolution, groups: list[Group], trace: list[str]) -> DraftPlan:
    """MTP draft layers: the target's backend, or (rule stage draft) their own selection, which then
    counts among the model's backends for the cache block, as vLLM's does."""
    if ctx.cfg.spec_decode.method != "mtp":
        return DraftPlan()
    policy, policy_trace = ctx.kept.value(("draft_policy",), partial(_draft_policy, ctx))
    trace.extend(policy_trace)
    drafts = ctx.kept.value(("drafts",), lambda: tuple(dr.draft_layer_groups(ctx.cfg, groups)))
    if policy != dr.OWN:
        return DraftPlan(drafts)
    pins = [ctx.cfg.attention.backend_per_kind.get(g.kind) for g in drafts]
    own = tuple(ctx.kept.choice(("draft_choice", j, pin), partial(_own_choice, ctx, g))
                for j, (g, pin) in enumerate(zip(drafts, pins)))
    for j, (g, ch, pin) in enumerate(zip(drafts, own, pins)):
        ctx.kept.value(("draft_init", j, pin), partial(layer_init_checks, ctx.book, g, ch))
    return DraftPlan(drafts, own)


def _own_choice(ctx: Resolution, g: Group) -> Choice:
    return dr.own_choices(ctx.cfg, ctx.book, ctx.facts, [g])[0]


def _draft_policy(ctx: Resolution) -> tuple[str, tuple[str, ...]]:
    """The draft policy and the trace its rules add."""
    trace: list[str] = []
    return dr.draft_policy(ctx.book, ctx.facts, trace), tuple(trace)


def _cache_block_size(ctx: Resolution, groups: list[Group], choices: list[Choice], drafts: DraftPlan,
                      trace: list[str]) -> int:
    """Cache block size: the user's, else the preferred size of the first layer's backend, or (rule stage
    cache_block) one size every distinct backend of the model accepts; a hybrid model's grows to hold a
    mamba state."""
    if ctx.cfg.kv_cache.block_size is not None:
        block_size = ctx.cfg.kv_cache.block_size
        trace.append("pin.kv_cache.block_size")
    else:
        default_block(ctx.book, ctx.facts, trace)
        policy = "first_layer"
        for c in ctx.book.matching("cache_block", ctx.facts):
            policy = c.rule.cache_block
            trace.append(c.id)
        attention = [i for i, g in enumerate(groups) if g.kind not in FIXED_KINDS]  # vLLM's _find_non_ssm_backends
        block_size = model_cache_block(ctx.book, [groups[i] for i in attention] + list(drafts.groups[: len(drafts.own_choices)]),
                                       [choices[i] for i in attention] + list(drafts.own_choices), policy, trace) \
            if attention else default_block(ctx.book, ctx.facts, None)
    attention_free = getattr(ctx.cfg.model, "attention_free_block", lambda: None)() is not None
    if any(g.kind == "mamba" for g in groups) and not attention_free:
        block_size = hybrid_block(ctx.cfg, groups, choices, block_size, trace)
    return block_size


def _kv_blocks(book: RuleBook, groups: list[Group], choices: list[Choice], block_size: int,
               state_block: int | None = None) -> list[int]:
    """KV block per group: full layers take the cache block; sliding-window layers pick their own from
    their backend's kernel blocks; an attention-free model's state takes `state_block` (max_model_len)."""
    out = []
    for g, ch in zip(groups, choices):
        if g.kind in FIXED_KINDS and state_block is not None:
            out.append(state_block)
            ch.trace.append("builtin.attention_free_state_block")
        elif g.kind in FIXED_KINDS:
            # a mamba state is padded to the attention page and kept in cache-block units (prefix caching's align
            # mode); the indexer's key cache takes the cache block
            out.append(block_size)
            ch.trace.append("builtin.fixed_kind_takes_cache_block")
        elif g.window is not None:
            out.append(_window_block(book, ch, block_size))
        else:
            out.append(block_size)
    return out


def _window_block(book: RuleBook, ch: Choice, block_size: int) -> int:
    """vLLM's _largest_kernel_block_within; rule stage swa_block: the smallest kernel block, or the largest
    whose page fits the cache block's page."""
    policy = "smallest"
    for c in book.matching("swa_block", ch.facts):
        policy = c.rule.swa_block
        ch.trace.append(c.id)
    if policy == "smallest":
        ch.trace.append("builtin.swa_smallest_kernel_block")
        return blk.smallest(ch.kernel_blocks)
    ch.trace.append("builtin.swa_largest_kernel_block_within_cache_block")
    return blk.largest_within(ch.kernel_blocks, block_size)


def _kv_dtype_ignored(cfg: KSelectConfig) -> tuple[KSelectConfig, list[SettingIgnored]]:
    """A model class that builds its attention without the cache config (Falcon's rotary and ALiBi layers) keeps its
    KV cache in the model's dtype whatever --kv-cache-dtype says: kselect selects so and warns."""
    why = getattr(cfg.model, "kv_cache_dtype_ignored", lambda: None)()
    if why is None or cfg.kv_cache.dtype == "auto":
        return cfg, []
    kv = cfg.kv_cache.model_copy(update={"dtype": "auto", "scales": "unit"})
    return cfg.model_copy(update={"kv_cache": kv}), [SettingIgnored(group=MODEL_GROUP, setting=f"kv_cache={cfg.kv_cache.dtype}", reason=why)]


def _kv_dtype_forced(cfg: KSelectConfig) -> tuple[KSelectConfig, list[str]]:
    """A model class whose engine hook resolves `--kv-cache-dtype auto` itself on some GPUs (GLM-MoE-DSA: FP8 on
    SM10x, vLLM's models/config.py): kselect resolves it the same way (the table's kv_auto_by_cc_major)."""
    cc = cfg.platform.compute_capability
    forced = getattr(cfg.model, "kv_auto_dtype", lambda major: None)(cc[0] if cc else None)
    if forced is None or cfg.kv_cache.dtype != "auto":
        return cfg, []
    return cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"dtype": forced})}), ["model.kv_auto_dtype"]


def _fa_pin_ignored(cfg: KSelectConfig, groups: list[GroupSelection]) -> list[SettingIgnored]:
    """A FlashAttention version pin no group runs: vLLM reads flash_attn_version only where a layer
    runs FlashAttention (a FLASHINFER/TRITON_ATTN pin, a platform without FlashAttention), so it
    selects as if there were none; kselect does the same and warns."""
    v = cfg.attention.flash_attn_version
    if v is None or any(g.flash_attn_version is not None for g in groups):
        return []
    where = f"attention.backend={cfg.attention.backend}" if cfg.attention.backend != "auto" else f"platform {cfg.platform.name}"
    return [SettingIgnored(group=MODEL_GROUP, setting=f"attention.flash_attn_version={v}",
                           reason=f"no layer group runs FlashAttention under {where}")]


def model_cache_block(book: RuleBook, groups: list[Group], choices: list[Choice], policy: str, trace: list[str]) -> int:
    """The cache manager block without a user block size (vLLM's update_block_size_for_backend):
    the preferred size of the first layer's backend, or (policy common_over_backends) one size
    every distinct backend of the model accepts."""
    order = sorted(range(len(groups)), key=lambda i: (groups[i].draft, min(groups[i].layers)))  # drafts load last
    distinct: dict[str, Choice] = {}
    for i in order:
        distinct.setdefault(choices[i].backend, choices[i])
    if policy == "first_layer" or len(distinct) == 1:
        return preferred_block(book, choices[order[0]], trace)
    size = blk.common([ch.model_kernel_blocks for ch in distinct.values()], default_block(book, choices[order[0]].facts, None))
    if size is None:
        raise SelectionError(
            Failure(code="no_common_cache_block"),
            {n: [rejection("block_size", n, capability="kernel_block_sizes", kernel_blocks=tuple(ch.model_kernel_blocks))]
             for n, ch in distinct.items()},
        )  # fmt: skip
    trace.append("builtin.common_block_over_backends")
    return size


def hybrid_block(cfg: KSelectConfig, groups: list[Group], choices: list[Choice], block_size: int, trace: list[str]) -> int:
    """vLLM's _align_hybrid_block_size (platforms/interface.py): the attention block grows, in steps of the first
    attention backend's kernel alignment, until one attention page holds the largest mamba state; a user's block
    size is overridden too. The mamba page is then padded to the attention page (prefix caching, on by default for
    hybrid models, keeps mamba blocks in the cache block's units)."""
    att = [(g, ch) for g, ch in zip(groups, choices) if g.kind not in FIXED_KINDS]
    kv_bytes = KV_BYTES[resolved_kv_dtype(cfg)]
    g0 = att[0][0]
    attn_page_1 = token_bytes(g0.kind, g0.num_kv_heads, g0.head_size, kv_bytes)
    model_bytes = KV_BYTES[cfg.model.dtype]
    mamba_page = max(sum(math.prod(shape) * (model_bytes if dt == "model" else KV_BYTES[dt]) for shape, dt in g.mamba_state)
                     for g in groups if g.kind == "mamba")
    smallest = [blk.smallest(ch.model_kernel_blocks) for _, ch in att]
    align = max(smallest[0], block_size)
    if g0.kind == "mla":
        align = max(align, 128)  # the TRTLLM/FlashInfer MLA decode kernels' alignment (vLLM's comment there)
    need = align * -(-mamba_page // (align * attn_page_1))
    step = math.lcm(*smallest)
    need = step * -(-need // step)
    if block_size < need:
        trace.append("builtin.hybrid_block_covers_mamba_state")
        return need
    return block_size


def layer_init_checks(book: RuleBook, g: Group, ch: Choice, kv_block: int | None = None) -> None:
    """Failures vLLM raises after selection (layer init, block checks, metadata builders), as
    `init` rules on the chosen backend (and a composite's children): kselect refuses at
    selection time with vLLM's text; there is no fallback, as in vLLM. Checked once at layer init, and again
    with the group's KV block (`group.kv_block`) once the blocks are known (the metadata builders')."""
    cap = book.capabilities[ch.backend]
    names = [ch.backend] + ([cap.composite.general, cap.composite.causal] if cap.composite else [])
    failed = {}
    for name in names:
        hits = [rejection("rule", name, rule=c.id, reason=c.rule.reason)
                for c in book.matching("init", ch.facts.for_candidate(name).with_kv_block(kv_block))]
        if hits:
            failed[name] = hits
    if failed:
        raise SelectionError(Failure(code="init_failure", backend=ch.backend, group=group_id(g.kind, g.draft), head=g.head_size), failed)


def cache_block(cfg: KSelectConfig, book: RuleBook, ch: Choice, trace: list[str]) -> int:
    """The cache block size of one stand-alone group: the user's, else `preferred_block`."""
    if cfg.kv_cache.block_size is not None:
        trace.append("pin.kv_cache.block_size")
        return cfg.kv_cache.block_size
    return preferred_block(book, ch, trace)


def default_block(book: RuleBook, facts: Facts, trace: list[str] | None) -> int:
    """The engine's default cache block (vLLM's CacheConfig.DEFAULT_BLOCK_SIZE): 16, or what
    the last matching `default_block` rule says (vLLM 0.34.0: 64)."""
    size = 16
    for c in book.matching("default_block", facts):
        size = c.rule.default_block_size
        if trace is not None:
            trace.append(c.id)
    return size


def preferred_block(book: RuleBook, ch: Choice, trace: list[str]) -> int:
    """The preferred size of `ch`'s backend (kernel blocks without a KV spec), raised by
    `preferred_block` rules."""
    block_size = blk.preferred(ch.model_kernel_blocks, default_block(book, ch.facts, None))
    for c in book.matching("preferred_block", ch.facts):
        block_size = max(block_size, c.rule.preferred_block_size_min)
        trace.append(c.id)
    return block_size


def resolve_path(cfg: KSelectConfig, kind: str, head_size: int, num_kv_heads: int = 1,
                 evidence: Evidence | None = None) -> GroupSelection:
    """One stand-alone layer group of `kind` with `head_size`, resolved under cfg's rules and pins
    (the conformance runner takes a claim's descale mode and page size from it; without evidence its
    claims read unverified). Raises SelectionError when no backend, or not the pinned one, is valid for it."""
    book = rulebook(cfg)
    window = cfg.model.sliding_window if kind == "sliding_window" else None
    g = Group(kind, (0,), head_size, num_kv_heads, window)
    facts = base_facts(cfg)
    ch = choose_backend(cfg, book, facts, g)
    kv_block = blk.smallest(ch.kernel_blocks) if window and cfg.kv_cache.block_size is None else cache_block(cfg, book, ch, [])
    conformance = (evidence or Evidence.none()).conformance(cfg.platform.gpu_model)
    return finish_group(Resolution(cfg, book, facts, resolved_kv_dtype(cfg), conformance), g, ch, kv_block)


# ---------------------------------------------------------------- pages, kernel blocks, quantization


def unify_pages(groups: list[Group], kv_blocks: list[int], dtype_bytes: int, choices: list[Choice]) -> list[int]:
    """vLLM's unify_kv_cache_spec_page_size: smaller pages that divide the largest grow to it. An MLA page holds
    one latent vector per token; a mamba group's page is padded to the attention page, not unified."""
    per_token = [token_bytes(g.kind, g.num_kv_heads, g.head_size, dtype_bytes) for g in groups]
    pages = [b * t for b, t in zip(kv_blocks, per_token)]
    largest = max((p for g, p in zip(groups, pages) if g.kind not in FIXED_KINDS), default=0)
    out = []
    for g, b, page, ch in zip(groups, kv_blocks, pages, choices):
        if page == largest or g.kind in FIXED_KINDS:
            out.append(b)
        elif largest % page == 0:
            out.append(b * (largest // page))
            ch.trace.append("builtin.page_unify")
            ch.reasons.append(f"kv block {b} -> {b * (largest // page)} to match the largest page ({largest} bytes)")
        else:
            raise SelectionError(Failure(code="page_unify", group=g.kind, page=page, largest_page=largest))
    return out


def _finished(ctx: Resolution, tag: tuple, g: Group, ch: Choice, kv_block: int) -> GroupSelection:
    """finish_group, once per prelude for what it reads: the group (`tag`: its place and its kind's pin), the
    choice with what the block steps added to it, and the KV block."""
    key = (*tag, ch.backend, ch.version, kv_block, tuple(ch.trace), tuple(ch.reasons))
    return ctx.kept.value(key, partial(finish_group, ctx, g, ch, kv_block))


def finish_group(ctx: Resolution, g: Group, ch: Choice, kv_block: int) -> GroupSelection:
    """A group's selection on its KV block: the kernel block, quantization, rule warnings and claims."""
    kernel_block = _kernel_block(ch, kv_block)
    quantization = _kv_quantization(ctx, ch)
    for c in ctx.book.matching("warning", ch.facts):
        ch.warnings.append(RuleWarning(group=group_id(g.kind, g.draft), rule=c.id, reason=c.rule.reason))
    fields = dict(kind=g.kind, draft=g.draft, layers=g.layers, reads_from=g.reads_from, head_size=g.head_size,
                  num_kv_heads=g.num_kv_heads, sliding_window=g.window, backend=ch.backend,
                  flash_attn_version=ch.version, kernel_block_size=kernel_block, kv_block_size=kv_block,
                  **quantization, mm_prefix=ctx.cfg.model.mm_prefix and not g.draft)
    claims, claim_warnings = claim_checks(ctx.conformance, ctx.cfg.platform, fields, ctx.cfg.model.dtype,
                                          group_id(g.kind, g.draft))
    return GroupSelection(**fields, sinks=g.sinks, sparse=g.sparse, mamba_type=g.mamba_type,
                          rejected={k: tuple(v) for k, v in ch.rejected.items()}, trace=tuple(ch.trace),
                          reasons=tuple(ch.reasons + g.notes), warnings=tuple(ch.warnings) + claim_warnings,
                          claims=claims)


def _kernel_block(ch: Choice, kv_block: int) -> int:
    """The kernel block the backend runs on `kv_block`: the block itself, or a kernel block dividing it."""
    kernel_block = blk.kernel_block_for(kv_block, ch.kernel_blocks)
    if kernel_block is None:
        raise SelectionError(Failure(code="no_common_block", kv_block=kv_block, backend=ch.backend,
                                     kernel_blocks=tuple(ch.kernel_blocks)))
    if kernel_block != kv_block:
        ch.trace.append("builtin.kernel_block_divides_kv_block")
        ch.reasons.append(f"kernel block {kernel_block} divides the kv block {kv_block}")
    return kernel_block


def _kv_quantization(ctx: Resolution, ch: Choice) -> dict:
    """The group's KV dtype, quant-query, descale mode and scales."""
    quantized = is_fp8(ctx.kv_dtype)
    quantizes_query = quant_query(ctx.book, ch, ch.backend, quantized)
    return dict(kv_cache_dtype=ctx.kv_dtype, quant_query=quantizes_query,
                descale=_descale(ctx.book, ch, quantizes_query) if quantized else "none",
                kv_scales=kv_scales(ctx.cfg) if quantized else "none")


def _descale(book: RuleBook, ch: Choice, quantizes_query: bool) -> str:
    """The FP8 descale mode: q, k and v when the query is quantized too, else k and v; `descale` rules (on a
    composite's causal child) override."""
    descale = "q_k_v" if quantizes_query else "k_v"
    cap = book.capabilities[ch.backend]
    facts = ch.facts.for_candidate(cap.composite.causal) if cap.composite else ch.facts
    for c in book.matching("descale", facts):
        descale = c.rule.descale
        ch.trace.append(c.id)
        ch.reasons.append(f"descale={descale}: {c.rule.reason} [{c.id}]")
    return descale


def quant_query(book: RuleBook, ch: Choice, name: str, quantized: bool) -> bool:
    """supports_quant_query_input of the impl; a composite quantizes q only if both children do."""
    cap = book.capabilities[name]
    if cap.composite is not None:
        return all(quant_query(book, ch, child, quantized) for child in (cap.composite.general, cap.composite.causal))
    quantizes = quantized and cap.quant_query
    for c in book.matching("quant_query", ch.facts.for_candidate(name)):
        quantizes = quantized and c.rule.quant_query
        ch.trace.append(c.id)
        ch.reasons.append(f"quant_query={quantizes}{'' if name == ch.backend else ' (' + name + ')'}: {c.rule.reason} [{c.id}]")
    return quantizes


# ---------------------------------------------------------------- MTP drafter


def draft_groups(ctx: Resolution, groups: list[Group], choices: list[Choice], targets: list[GroupSelection],
                 drafts: DraftPlan) -> list[GroupSelection]:
    """The draft layers' groups, finished on the target group's KV block (they share its cache).
    With their own selection, the kernel block is one both backends of the shared KV-cache group
    take; where vLLM keeps the kind in one group, the target's (in `targets`) changes too."""
    copy = ctx.facts.spec.copy_target_kv_scales
    scales = ("copied_from_target" if copy else "unit") if is_fp8(ctx.kv_dtype) else "none"
    out = []
    for j, g in enumerate(drafts.groups):
        i = next(i for i, t in enumerate(targets) if t.kind == g.kind)
        target = targets[i]
        if drafts.own_choices:
            ch = drafts.own_choices[j]
            kernel_block = _shared_kernel_block(target, choices[i], ch)
            if kernel_block != target.kernel_block_size:
                targets[i] = _target_sharing_kernel_block(ctx.cfg, groups, target, g, ch.backend, kernel_block)
        else:
            ch = ctx.kept.choice(("target_choice", j, target.backend, target.flash_attn_version),
                                 partial(dr.target_choice, ctx.book, ctx.facts, g, target))
            kernel_block = target.kernel_block_size
        tag = ("draft", j, ctx.cfg.attention.backend_per_kind.get(g.kind))
        finished = _finished(ctx, tag, g, ch, target.kv_block_size)
        out.append(finished.model_copy(update={"kv_scales": scales, "kernel_block_size": kernel_block}))
    return out


def _shared_kernel_block(target: GroupSelection, target_choice: Choice, draft_choice: Choice) -> int:
    kernel_block = dr.shared_kernel_block(target.kv_block_size, target_choice, draft_choice)
    if kernel_block is None:
        raise SelectionError(Failure(code="no_common_block", kv_block=target.kv_block_size,
                                     backend=f"{target.backend}+{draft_choice.backend}",
                                     kernel_blocks=tuple(target_choice.kernel_blocks) + tuple(draft_choice.kernel_blocks)))
    return kernel_block


def _target_sharing_kernel_block(cfg: KSelectConfig, groups: list[Group], target: GroupSelection, draft: Group,
                                 draft_backend: str, kernel_block: int) -> GroupSelection:
    """The target group after its draft layers' backend moved the shared kernel block: its own kernel block
    where vLLM keeps the kind in one KV-cache group, else a note on the split-off group that shares it."""
    first_shared = cfg.model.num_hidden_layers - cfg.model.num_kv_shared_layers
    if dr.one_vllm_group(draft.kind, groups, first_shared):
        note = f"kernel block {kernel_block}: shared with the draft layers' {draft_backend} (one KV-cache group)"
        return target.model_copy(update={"kernel_block_size": kernel_block, "reasons": target.reasons + (note,),
                                         "trace": target.trace + ("builtin.kernel_block_shared_with_draft",)})
    return target.model_copy(update={"draft_shared_kernel_block": kernel_block,
                                     "reasons": target.reasons + (dr.draft_note(kernel_block, group_id(draft.kind, True)),)})


def _environment(ctx: Resolution) -> dict:
    """environment_summary(cfg, facts), made once per prelude but for the per-group pins (all the prelude's
    combinations differ in), its lists and dicts copied."""
    base = ctx.kept.value(("environment",), partial(environment_summary, ctx.cfg, ctx.facts))
    env = {k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    env["pins"]["backend_per_kind"] = dict(ctx.cfg.attention.backend_per_kind)
    return env


def environment_summary(cfg: KSelectConfig, facts: Facts) -> dict:
    p = cfg.platform
    return {
        "platform": p.name,
        "device": p.device,
        "compute_capability": list(p.compute_capability) if p.compute_capability else None,
        "gpu_model": p.gpu_model,
        "packages": [k for k, v in p.packages.model_dump().items() if v],
        "model": cfg.model.name,
        "dtype": cfg.model.dtype,
        "multimodal": cfg.model.multimodal,
        "kv_cache_dtype": cfg.kv_cache.dtype,
        "kv_cache_dtype_resolved": resolved_kv_dtype(cfg),
        "kv_cache_dtype_source": kv_dtype_source(cfg),
        "kv_scales": kv_scales(cfg),
        "user_block_size": cfg.kv_cache.block_size,
        "spec_decode": cfg.spec_decode.method,
        "num_speculative_tokens": cfg.spec_decode.num_speculative_tokens,
        "copy_target_kv_scales": facts.spec.copy_target_kv_scales if cfg.spec_decode.method == "mtp" else None,
        "pins": {
            "backend": cfg.attention.backend,
            "flash_attn_version": cfg.attention.flash_attn_version,
            "backend_per_kind": dict(cfg.attention.backend_per_kind),
        },
        "effective_pins": {"backend": facts.pin.backend, "flash_attn_version": facts.pin.flash_attn_version},
        "overlays": list(cfg.overlays),
        "rules": cfg.ruleset.name,
    }
