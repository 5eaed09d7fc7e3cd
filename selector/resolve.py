"""`resolve()`: a validated config -> a `Selection` per KV-cache layer group.

The order follows vLLM's: model-level forcing, FlashAttention version per group, backend
priority with every candidate validated (reasons kept), an explicit pin validated alone
with no fallback, kernel block sizes, preferred block size, sliding-window block, page-size
unification, kernel block per group, quant-query, FP8 descales, MTP draft groups, warnings.
Steps that are engine mechanics (not rules) appear in traces as `builtin.*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import blocks as blk
from .conformance import claim_checks
from .errors import SelectionError
from .rulebook import RuleBook, rulebook
from .schema import BlockSpec, Capability, KSelectConfig
from .selection import GroupSelection, Selection

KV_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass
class Group:
    """A KV-cache layer group of the model, before selection."""

    kind: str
    layers: tuple[int, ...]
    head_size: int
    num_kv_heads: int
    window: int | None
    draft: bool = False
    reads_from: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)


@dataclass
class Choice:
    backend: str
    version: int | None
    kernel_blocks: list[BlockSpec]  # for this group's KV spec (its head size)
    facts: dict
    trace: list[str]
    reasons: list[str]
    rejected: dict[str, list[str]]
    warnings: list[str]
    model_kernel_blocks: list[BlockSpec] = field(default_factory=list)  # without a spec: model-level head size


def resolve(cfg: KSelectConfig, book: RuleBook | None = None) -> Selection:
    book = book or rulebook(cfg)
    facts = base_facts(cfg)
    model_trace: list[str] = []
    model_reasons: list[str] = []

    # 1. Model-level forcing (Gemma-4 mixed head sizes), written into the effective pins.
    for c in book.matching("model", facts):
        if c.rule.set.flash_attn_version is not None:
            facts["pin.flash_attn_version"] = c.rule.set.flash_attn_version
        if c.rule.set.backend is not None:
            facts["pin.backend"] = c.rule.set.backend
        model_trace.append(c.id)
        model_reasons.append(f"{c.rule.reason} [{c.id}]")

    # 2. MTP: do draft layers dequantize with the target's K/V scales?
    copy = False
    if cfg.spec_decode.method == "mtp":
        for c in book.matching("spec", facts):
            copy = c.rule.copy_target_kv_scales
            model_trace.append(c.id)
        if cfg.spec_decode.copy_target_kv_scales is not None:
            copy = cfg.spec_decode.copy_target_kv_scales
            model_trace.append("pin.spec_decode.copy_target_kv_scales")
    facts["spec.copy_target_kv_scales"] = copy

    groups = target_groups(cfg)
    choices = [choose_backend(cfg, book, facts, g) for g in groups]
    for g, ch in zip(groups, choices):
        layer_init_checks(book, g, ch)

    # 3. Cache block size: user's, else the preferred size of the first layer's backend, or
    #    (rule stage cache_block) one size every distinct backend of the model accepts.
    if cfg.kv_cache.block_size is not None:
        block_size = cfg.kv_cache.block_size
        model_trace.append("pin.kv_cache.block_size")
    else:
        policy = "first_layer"
        for c in book.matching("cache_block", facts):
            policy = c.rule.cache_block
            model_trace.append(c.id)
        block_size = cache_block(book, groups, choices, policy, model_trace, model_reasons)

    # 4. KV block per group: full layers take the cache block; sliding-window layers pick their
    #    own from their backend's kernel blocks (vLLM's _largest_kernel_block_within; rule stage
    #    swa_block: the smallest, or the largest whose page fits the cache block's page).
    kv_blocks = []
    for g, ch in zip(groups, choices):
        if g.window is not None:
            swa = "smallest"
            for c in book.matching("swa_block", ch.facts):
                swa = c.rule.swa_block
                ch.trace.append(c.id)
            if swa == "smallest":
                kv_blocks.append(blk.smallest(ch.kernel_blocks))
                ch.trace.append("builtin.swa_smallest_kernel_block")
            else:
                kv_blocks.append(blk.largest_within(ch.kernel_blocks, block_size))
                ch.trace.append("builtin.swa_largest_kernel_block_within_cache_block")
        else:
            kv_blocks.append(block_size)
    kv_dtype = resolved_kv_dtype(cfg)
    kv_blocks = unify_pages(groups, kv_blocks, KV_BYTES[kv_dtype], choices)

    out: list[GroupSelection] = []
    for g, ch, kvb in zip(groups, choices, kv_blocks):
        out.append(finish_group(cfg, book, g, ch, kvb, kv_dtype))
    if cfg.spec_decode.method == "mtp":
        out.extend(draft_groups(cfg, book, facts, out, kv_dtype, copy))

    warnings = [f"overlay disabled rule '{r}', which no config defines (no effect)" for r in book.orphans]
    env = environment_summary(cfg, facts)
    return Selection(
        environment=env,
        block_size=block_size,
        groups=tuple(out),
        warnings=tuple(warnings),
        trace=tuple(model_trace),
    )


def cache_block(book: RuleBook, groups, choices, policy, trace, reasons) -> int:
    """The cache manager block without a user block size (vLLM's update_block_size_for_backend)."""
    order = sorted(range(len(groups)), key=lambda i: min(groups[i].layers))
    distinct: dict[str, Choice] = {}
    for i in order:
        distinct.setdefault(choices[i].backend, choices[i])
    if policy == "first_layer":
        distinct = dict([next(iter(distinct.items()))])
    if len(distinct) == 1:
        ch = next(iter(distinct.values()))
        size = blk.preferred(ch.model_kernel_blocks, 16)
        for c in book.matching("preferred_block", ch.facts):
            size = max(size, c.rule.preferred_block_size_min)
            trace.append(c.id)
            reasons.append(f"preferred block {size}: {c.rule.reason} [{c.id}]")
        return size
    size = blk.common(list(ch.model_kernel_blocks for ch in distinct.values()), 16)
    if size is None:
        raise SelectionError(
            "The attention backends share no supported KV cache block size ("
            + "; ".join(f"{n}: {blk.describe(ch.model_kernel_blocks)}" for n, ch in distinct.items()) + ")"
        )
    trace.append("builtin.common_block_over_backends")
    return size


def layer_init_checks(book: RuleBook, g: Group, ch: Choice) -> None:
    """Failures vLLM raises after selection (layer init, block checks, metadata builders),
    as `init` rules on the chosen backend (and a composite's children): kselect refuses at
    selection time with vLLM's text; there is no fallback, as in vLLM."""
    cap = book.capabilities[ch.backend]
    names = [ch.backend] + ([cap.composite.general, cap.composite.causal] if cap.composite else [])
    failed: dict[str, list[str]] = {}
    for name in names:
        f = dict(ch.facts)
        f["candidate.backend"] = name
        hits = [f"{c.rule.reason} [{c.id}]" for c in book.matching("init", f)]
        if hits:
            failed[name] = hits
    if failed:
        raise SelectionError(
            f"vLLM fails after selecting {ch.backend} for the {g.kind} group (head {g.head_size}):",
            failed,
        )


# ---------------------------------------------------------------- facts


def base_facts(cfg: KSelectConfig) -> dict:
    p, m, kv, sd, pins = cfg.platform, cfg.model, cfg.kv_cache, cfg.spec_decode, cfg.attention
    cc = p.compute_capability
    heads = {m.head_dim, m.global_head_dim}
    f = {
        "platform.name": p.name,
        "platform.vendor": p.vendor,
        "platform.device": p.device,
        "platform.cc_major": cc[0] if cc else None,
        "platform.cc_minor": cc[1] if cc else None,
        "platform.gpu_model": p.gpu_model,
        "model.name": m.name,
        "model.architecture": m.architecture,
        "model.dtype": m.dtype,
        "model.multimodal": m.multimodal,
        "model.head_size": max(heads),
        "model.mixed_head_sizes": len(heads) > 1,
        "kv.dtype": kv.dtype,
        "kv.quantized": kv.quantized,
        "kv.scales": kv.scales,
        "kv.block_size": kv.block_size,
        "spec.method": sd.method,
        "pin.backend": None if pins.backend == "auto" else pins.backend,
        "pin.flash_attn_version": pins.flash_attn_version,
    }
    for name, on in p.packages.model_dump().items():
        f[f"platform.packages.{name}"] = on
    return f


def resolved_kv_dtype(cfg: KSelectConfig) -> str:
    d = cfg.kv_cache.dtype
    if d == "auto":
        return cfg.model.dtype
    return "fp8_e4m3" if d == "fp8" else d


def target_groups(cfg: KSelectConfig) -> list[Group]:
    m = cfg.model
    types = m.resolved_layer_types()
    first_shared = m.num_hidden_layers - m.num_kv_shared_layers
    groups = []
    for kind, ltype in (("sliding_window", "sliding_attention"), ("full_attention", "full_attention")):
        layers = tuple(i for i, t in enumerate(types) if t == ltype)
        if not layers:
            continue
        sliding = kind == "sliding_window"
        g = Group(
            kind=kind,
            layers=layers,
            head_size=m.head_dim if sliding else m.global_head_dim,
            num_kv_heads=m.num_key_value_heads if sliding else m.global_kv_heads(),
            window=m.sliding_window if sliding else None,
        )
        shared = [i for i in layers if i >= first_shared]
        producers = [i for i in layers if i < first_shared]
        if shared:
            g.notes.append(f"layers {_ranges(shared)} reuse the cache of layer {producers[-1]} (KV sharing)")
        groups.append(g)
    return groups


def group_facts(facts: dict, g: Group) -> dict:
    f = dict(facts)
    f["group.kind"] = g.kind
    f["group.head_size"] = g.head_size
    f["group.num_kv_heads"] = g.num_kv_heads
    f["group.sliding_window"] = g.window is not None
    f["group.draft"] = g.draft
    f["candidate.mm_prefix"] = bool(f["model.multimodal"]) and not g.draft  # a composite's causal child: false
    return f


# ---------------------------------------------------------------- FlashAttention version


def fa_version(book: RuleBook, facts: dict, head: int | None) -> tuple[int | None, list[str]]:
    """Apply the `fa_version` rules in order; each matching rule overrides the last."""
    key = ("fa_version", head, tuple(map(facts.get, book.reads("fa_version"))))  # fa.* facts: reset below
    version, trace = book.memo(key, lambda: _fa_version(book, facts, head))
    return version, list(trace)


def _fa_version(book: RuleBook, facts: dict, head: int | None) -> tuple[int | None, tuple[str, ...]]:
    f = dict(facts)
    f["fa.head_size"] = head
    f["fa.version"] = None
    trace = []
    for c in book.stage("fa_version"):
        if c.pred(f):
            v = c.rule.flash_attn_version
            f["fa.version"] = f.get(v.from_) if hasattr(v, "from_") else v
            trace.append(c.id)
    return f["fa.version"], tuple(trace)


# ---------------------------------------------------------------- backend choice


def choose_backend(cfg: KSelectConfig, book: RuleBook, facts: dict, g: Group) -> Choice:
    f = group_facts(facts, g)
    uses_fa = any(cap.flash_attn for cap in book.capabilities.values())
    fa_trace: list[str] = []
    if uses_fa:
        f["fa.version"], fa_trace = fa_version(book, f, g.head_size)
        f["fa.version_default"], _ = fa_version(book, f, None)
        f["fa.version_model_head"], _ = fa_version(book, f, f["model.head_size"])
    pin = cfg.attention.backend_per_kind.get(g.kind) or f["pin.backend"]
    if pin is not None and g.kind in cfg.attention.backend_per_kind:
        pin_src = f"attention.backend_per_kind.{g.kind}"
    elif pin is not None and cfg.attention.backend != "auto":
        pin_src = "attention.backend"
    else:
        pin_src = "model forcing"
    if pin is not None:
        reasons, kblocks, ktrace, cf, mblocks = validate(book, f, pin)
        if reasons:
            raise SelectionError(
                f"Selected backend {pin} (from {pin_src}) is not valid for the {g.kind} group "
                f"(head {g.head_size}). No fallback for an explicit backend.",
                {pin: reasons},
            )
        trace = [f"builtin.pin:{pin}"] + ktrace
        why = [f"{pin} pinned by {pin_src}; validated alone (no fallback)"]
        return _choice(book, cf, pin, kblocks, trace + (fa_trace if book.capabilities[pin].flash_attn else []), why, {}, [], mblocks)

    prio_rules = book.matching("priority", f)
    if not prio_rules:
        raise SelectionError(f"no priority rule matches platform {f['platform.name']} (device {f['platform.device']})")
    prio = prio_rules[-1]
    rejected: dict[str, list[str]] = {}
    for name in prio.rule.priority:
        reasons, kblocks, ktrace, cf, mblocks = validate(book, f, name)
        if reasons:
            rejected[name] = reasons
            continue
        trace = [prio.id] + ktrace + (fa_trace if book.capabilities[name].flash_attn else [])
        why = [f"{name} is the first valid backend of {prio.rule.priority} ({prio.rule.reason}) [{prio.id}]"]
        warns = []
        if cfg.kv_cache.block_size is not None:
            blocked = [n for n, r in rejected.items() if len(r) == 1 and r[0].startswith("block_size not supported")]
            if blocked:
                warns.append(f"kv_cache.block_size={cfg.kv_cache.block_size} precluded higher-priority backend(s) {blocked}")
        return _choice(book, cf, name, kblocks, trace, why, rejected, warns, mblocks)
    raise SelectionError(
        f"No valid attention backend for the {g.kind} group (head {g.head_size}) on {f['platform.name']} "
        f"with model {f['model.name']} {f['model.dtype']}, kv_cache {f['kv.dtype']}. Reasons:",
        rejected,
    )


def _choice(book, cf, name, kblocks, trace, why, rejected, warns, mblocks) -> Choice:
    cap = book.capabilities[name]
    version = cf.get("fa.version") if cap.flash_attn else None
    if cap.flash_attn:
        why.append(f"FlashAttention version {version} for head {cf['group.head_size']}")
    if cap.composite:
        why.append(f"{name} runs {cap.composite.general} for batches with image spans, {cap.composite.causal} for causal batches")
    return Choice(name, version, kblocks, cf, trace, why, rejected, warns, mblocks)


def validate(book: RuleBook, f: dict, name: str) -> tuple[list[str], list[BlockSpec], list[str], dict, list[BlockSpec]]:
    """vLLM's validate_configuration as data: capability checks, then `reject` rules.
    Returns (reasons, kernel blocks for the group's spec, trace, candidate facts, kernel
    blocks without a spec: what vLLM checks a user block size against and prefers from)."""
    cap: Capability = book.capabilities[name]
    cf = dict(f)
    cf["candidate.backend"] = name
    kblocks, trace = kernel_blocks(book, cf, name, "group")
    mblocks, _ = kernel_blocks(book, cf, name, "model")
    tag = f"cap.{name}"
    r: list[str] = []
    device, cc = cf["platform.device"], (cf["platform.cc_major"], cf["platform.cc_minor"])
    if device not in cap.devices:
        r.append(f"device {device} not supported [{tag}.devices]")
    if cap.package and not cf[f"platform.packages.{cap.package}"]:
        r.append(f"ImportError: {cap.package} is not installed on this platform [{tag}.package]")
    if not cap.head_sizes.allows(cf["group.head_size"]):
        r.append(f"head_size not supported [{tag}.head_sizes]")
    if cap.composite is None:
        if cf["model.dtype"] not in cap.dtypes:
            r.append(f"dtype not supported [{tag}.dtypes]")
        if cf["kv.dtype"] not in cap.kv_cache_dtypes:
            r.append(f"kv_cache_dtype not supported [{tag}.kv_cache_dtypes]")
    if cf["kv.block_size"] is not None and not (mblocks and blk.supports(mblocks, cf["kv.block_size"])):
        r.append(f"block_size not supported (kernel blocks {blk.describe(mblocks)}) [{tag}.kernel_block_sizes]")
    if cap.composite is None and cf["candidate.mm_prefix"] and not cap.mm_prefix:
        r.append(f"partial multimodal token full attention not supported [{tag}.mm_prefix]")
    if cc[0] is not None and (
        (cap.min_compute_capability and cc < tuple(cap.min_compute_capability))
        or (cap.max_compute_capability and cc > tuple(cap.max_compute_capability))
    ):
        r.append(f"compute capability not supported [{tag}.compute_capability]")
    if cap.composite is None and cf["group.sliding_window"] and not cap.sliding_window:
        r.append(f"sliding window not supported [{tag}.sliding_window]")
    if cap.composite is not None:
        # each child validated alone; only the general (image-span) child sees mm-prefix
        for child in (cap.composite.general, cap.composite.causal):
            cfc = dict(f)
            if child == cap.composite.causal:
                cfc["candidate.mm_prefix"] = False
            rc, _, _, _, _ = validate(book, cfc, child)
            r += [f"{child}: {x}" for x in rc]
    for c in book.matching("reject", cf):
        r.append(f"{c.rule.reason} [{c.id}]")
    return r, kblocks, trace, cf, mblocks


def kernel_blocks(book: RuleBook, cf: dict, name: str, context: str) -> tuple[list[BlockSpec], list[str]]:
    """A backend's kernel block sizes. vLLM asks with a group's KV spec (its head size) when it
    sizes and splits pages, and without one (the model-level head size) when it checks a user
    block size and picks the preferred one: rules read `kb.head_size` / `kb.fa_version`."""
    cap = book.capabilities[name]
    f = dict(cf)
    f["candidate.backend"] = name
    f["kb.context"] = context
    f["kb.head_size"] = f["model.head_size"] if context == "model" else f["group.head_size"]
    f["kb.fa_version"] = f.get("fa.version_model_head" if context == "model" else "fa.version")
    if cap.composite is not None:
        kids = [kernel_blocks(book, cf, child, context)[0] for child in (cap.composite.general, cap.composite.causal)]
        if cap.composite.kernel_block_sizes is not None:
            blocks = [b for b in cap.composite.kernel_block_sizes if all(blk.supports(k, b) for k in kids)]
        else:
            blocks = blk.intersect(*kids)
    else:
        blocks = list(cap.kernel_block_sizes)
    trace = []
    for c in book.matching("kernel_block", f):
        blocks = list(c.rule.kernel_block_sizes)
        trace.append(c.id)
    return blocks, trace


# ---------------------------------------------------------------- blocks, quant-query, descales


def unify_pages(groups: list[Group], kv_blocks: list[int], dtype_bytes: int, choices: list[Choice]) -> list[int]:
    """vLLM's unify_kv_cache_spec_page_size: smaller pages that divide the largest grow to it."""
    per_token = [2 * g.num_kv_heads * g.head_size * dtype_bytes for g in groups]
    pages = [b * t for b, t in zip(kv_blocks, per_token)]
    largest = max(pages)
    out = []
    for g, b, page, ch in zip(groups, kv_blocks, pages, choices):
        if page == largest:
            out.append(b)
        elif largest % page == 0:
            out.append(b * (largest // page))
            ch.trace.append("builtin.page_unify")
            ch.reasons.append(f"kv block {b} -> {b * (largest // page)} to match the largest page ({largest} bytes)")
        else:
            raise SelectionError(
                f"cannot unify KV page sizes: the {g.kind} page ({page} bytes) does not divide the largest ({largest} bytes)"
            )
    return out


def finish_group(cfg: KSelectConfig, book: RuleBook, g: Group, ch: Choice, kvb: int, kv_dtype: str) -> GroupSelection:
    kb = blk.kernel_block_for(kvb, ch.kernel_blocks)
    if kb is None:
        raise SelectionError(f"No common block size for {kvb}: {ch.backend} kernel blocks {blk.describe(ch.kernel_blocks)}")
    if kb != kvb:
        ch.trace.append("builtin.kernel_block_divides_kv_block")
        ch.reasons.append(f"kernel block {kb} divides the kv block {kvb}")
    quantized = kv_dtype in ("fp8_e4m3", "fp8_e5m2")
    qq = quant_query(book, ch, ch.backend, quantized)
    descale = ("q_k_v" if qq else "k_v") if quantized else "none"
    cap = book.capabilities[ch.backend]
    df = dict(ch.facts, **{"candidate.backend": cap.composite.causal}) if cap.composite else ch.facts
    if quantized:
        for c in book.matching("descale", df):
            descale = c.rule.descale
            ch.trace.append(c.id)
            ch.reasons.append(f"descale={descale}: {c.rule.reason} [{c.id}]")
    for c in book.matching("warning", ch.facts):
        ch.warnings.append(f"{c.rule.reason} [{c.id}]")
    scales = cfg.kv_cache.scales if quantized else "none"
    return _group_selection(cfg, g, ch, kb, kvb, kv_dtype, qq, descale, scales)


def quant_query(book: RuleBook, ch: Choice, name: str, quantized: bool) -> bool:
    """supports_quant_query_input of the impl; a composite quantizes q only if both children do."""
    cap = book.capabilities[name]
    if cap.composite is not None:
        return all(quant_query(book, ch, child, quantized) for child in (cap.composite.general, cap.composite.causal))
    f = dict(ch.facts, **{"candidate.backend": name})
    qq = quantized and cap.quant_query
    for c in book.matching("quant_query", f):
        qq = quantized and c.rule.quant_query
        ch.trace.append(c.id)
        ch.reasons.append(f"quant_query={qq}{'' if name == ch.backend else ' (' + name + ')'}: {c.rule.reason} [{c.id}]")
    return qq


def _group_selection(cfg, g: Group, ch: Choice, kb, kvb, kv_dtype, qq, descale, scales) -> GroupSelection:
    fields = dict(
        kind=g.kind,
        draft=g.draft,
        layers=g.layers,
        reads_from=g.reads_from,
        head_size=g.head_size,
        num_kv_heads=g.num_kv_heads,
        sliding_window=g.window,
        backend=ch.backend,
        flash_attn_version=ch.version,
        kernel_block_size=kb,
        kv_block_size=kvb,
        kv_cache_dtype=kv_dtype,
        quant_query=qq,
        descale=descale,
        kv_scales=scales,
        mm_prefix=cfg.model.multimodal and not g.draft,
    )
    claims, claim_warnings = claim_checks(cfg.platform, fields, cfg.model.dtype)
    return GroupSelection(
        **fields,
        rejected={k: tuple(v) for k, v in ch.rejected.items()},
        trace=tuple(ch.trace),
        reasons=tuple(ch.reasons + g.notes),
        warnings=tuple(ch.warnings + claim_warnings),
        claims=claims,
    )


# ---------------------------------------------------------------- MTP drafter


def draft_groups(cfg, book, facts, targets: list[GroupSelection], kv_dtype: str, copy: bool) -> list[GroupSelection]:
    """Draft layers read the cache of the last non-shared target layer of their type, on the
    target group's backend (vLLM passes the target's backend to the draft config)."""
    m = cfg.model
    types = m.resolved_layer_types()
    first_shared = m.num_hidden_layers - m.num_kv_shared_layers
    out = []
    for kind, ltype in (("sliding_window", "sliding_attention"), ("full_attention", "full_attention")):
        layers = tuple(i for i, t in enumerate(m.drafter.layer_types) if t == ltype)
        if not layers:
            continue
        target = next(t for t in targets if t.kind == kind)
        producer = max(i for i, t in enumerate(types) if t == ltype and i < first_shared)
        g = Group(kind, layers, target.head_size, target.num_kv_heads, target.sliding_window, True, (producer,))
        f = group_facts(facts, g)
        # draft layers are text-only: a composite's image-span route never serves them, so they
        # run its causal child (vLLM 0.33.0's drafts select FLASH_ATTN / FLASHINFER there)
        comp = book.capabilities[target.backend].composite
        backend = comp.causal if comp else target.backend
        if book.capabilities[backend].flash_attn:
            f["fa.version"], _ = fa_version(book, f, g.head_size)
            f["fa.version_default"], _ = fa_version(book, f, None)
            f["fa.version_model_head"], _ = fa_version(book, f, f["model.head_size"])
        reasons, kblocks, ktrace, cf, mblocks = validate(book, f, backend)
        if reasons:
            raise SelectionError(
                f"MTP draft {kind} layers must run on the target's backend {backend}, which is not valid for them.",
                {backend: reasons},
            )
        ch = Choice(
            backend,
            target.flash_attn_version,
            kblocks,
            cf,
            ["builtin.draft_uses_target_backend"] + ktrace,
            [f"draft layers {list(layers)} read target layer {producer}'s cache on the target's backend"],
            {},
            [],
            mblocks,
        )
        quantized = kv_dtype in ("fp8_e4m3", "fp8_e5m2")
        scales = ("copied_from_target" if copy else "unit") if quantized else "none"
        gs = finish_group(cfg, book, g, ch, target.kv_block_size, kv_dtype)
        out.append(gs.model_copy(update={"kv_scales": scales, "kernel_block_size": target.kernel_block_size}))
    return out


def environment_summary(cfg: KSelectConfig, facts: dict) -> dict:
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
        "kv_scales": cfg.kv_cache.scales,
        "user_block_size": cfg.kv_cache.block_size,
        "spec_decode": cfg.spec_decode.method,
        "num_speculative_tokens": cfg.spec_decode.num_speculative_tokens,
        "copy_target_kv_scales": facts["spec.copy_target_kv_scales"] if cfg.spec_decode.method == "mtp" else None,
        "pins": {
            "backend": cfg.attention.backend,
            "flash_attn_version": cfg.attention.flash_attn_version,
            "backend_per_kind": dict(cfg.attention.backend_per_kind),
        },
        "effective_pins": {"backend": facts["pin.backend"], "flash_attn_version": facts["pin.flash_attn_version"]},
        "overlays": list(cfg.overlays),
        "rules": cfg.ruleset.name,
    }


def _ranges(xs: list[int]) -> str:
    xs = sorted(xs)
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if x is not None:
            start = prev = x
    return ",".join(out)

