"""Candidates for one layer group: the facts rules read, the FlashAttention version, and
vLLM's validate_configuration as data (capability checks, then `reject` rules), each refusal a
`records.Rejection`. `resolve.py` orders the steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import blocks as blk
from ..base.errors import SelectionError
from ..outputs.records import BlockSizePrecluded, Failure, Rejection, rejection
from ..rules.rulebook import RuleBook
from ..config.schema import BlockSpec, Capability, KSelectConfig
from ..config.vocab import FIXED_KINDS, group_id


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
    sinks: bool = False
    sparse: bool = False
    mamba_type: str | None = None
    mamba_state: tuple = ()


@dataclass
class Choice:
    backend: str
    version: int | None
    kernel_blocks: list[BlockSpec]
    facts: dict
    trace: list[str]
    reasons: list[str]
    rejected: dict[str, list[Rejection]]
    warnings: list
    model_kernel_blocks: list[BlockSpec] = field(default_factory=list)  # without a KV spec: model-level head size


def group_facts(facts: dict, g: Group) -> dict:
    f = dict(facts)
    f["group.kind"] = g.kind
    f["group.head_size"] = g.head_size
    f["group.num_kv_heads"] = g.num_kv_heads
    f["group.sliding_window"] = g.window is not None
    f["group.draft"] = g.draft
    f["group.sinks"] = g.sinks
    f["group.sparse"] = g.sparse
    f["group.mamba_type"] = g.mamba_type
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
    if g.kind in FIXED_KINDS:
        return state_backend(book, f, g)
    uses_fa = any(cap.flash_attn for cap in book.capabilities.values())
    fa_trace: list[str] = []
    if uses_fa:
        f["fa.version"], fa_trace = fa_version(book, f, g.head_size)
        f["fa.version_default"], _ = fa_version(book, f, None)
        f["fa.version_model_head"], _ = fa_version(book, f, f["model.head_size"])
    per_kind = cfg.attention.backend_per_kind.get(g.kind)
    per_kind = None if per_kind == "auto" else per_kind  # `auto` for one group: that group is not pinned
    pin = per_kind or f["pin.backend"]
    if pin is not None and per_kind is not None:
        pin_src = f"attention.backend_per_kind.{g.kind}"
    elif pin is not None and cfg.attention.backend != "auto":
        pin_src = "attention.backend"
    else:
        pin_src = "model forcing"
    if pin is not None:
        reasons, kblocks, ktrace, cf, mblocks = validate(book, f, pin)
        if reasons:
            raise SelectionError(
                Failure(code="pin_invalid", backend=pin, pin_source=pin_src, group=group_id(g.kind, g.draft), head=g.head_size), {pin: reasons}
            )
        trace = [f"builtin.pin:{pin}"] + ktrace
        why = [f"{pin} pinned by {pin_src}; validated alone (no fallback)"]
        return _choice(book, cf, pin, kblocks, trace + (fa_trace if book.capabilities[pin].flash_attn else []), why, {}, [], mblocks)

    prio_rules = book.matching("priority", f)
    if not prio_rules:
        raise SelectionError(Failure(code="no_priority_rule", platform=f["platform.name"], device=f["platform.device"]))
    prio = prio_rules[-1]
    rejected: dict[str, list[Rejection]] = {}
    for name in prio.rule.priority:
        reasons, kblocks, ktrace, cf, mblocks = validate(book, f, name)
        if reasons:
            rejected[name] = reasons
            continue
        trace = [prio.id] + ktrace + (fa_trace if book.capabilities[name].flash_attn else [])
        why = [f"{name} is the first valid backend of {prio.rule.priority} ({prio.rule.reason}) [{prio.id}]"]
        warns = []
        if cfg.kv_cache.block_size is not None:
            blocked = tuple(n for n, r in rejected.items() if len(r) == 1 and r[0].code == "block_size")
            if blocked:
                warns.append(BlockSizePrecluded(group=group_id(g.kind, g.draft), block_size=cfg.kv_cache.block_size, backends=blocked))
        return _choice(book, cf, name, kblocks, trace, why, rejected, warns, mblocks)
    raise SelectionError(
        Failure(code="no_valid_backend", group=group_id(g.kind, g.draft), head=g.head_size, platform=f["platform.name"], model=f["model.name"],
                dtype=f["model.dtype"], kv_dtype=f["kv.dtype"]),
        rejected,
    )  # fmt: skip


def state_backend(book: RuleBook, f: dict, g: Group) -> Choice:
    """A fixed-kind group's backend: the one declared for its layer type (vLLM maps each mamba layer type, and the
    V3.2 indexer cache, to one backend, with no priority list and no attention pin)."""
    names = [n for n, cap in book.capabilities.items() if g.mamba_type in cap.mamba_types]
    if not names:
        raise SelectionError(Failure(code="no_valid_backend", group=group_id(g.kind, g.draft), head=g.head_size,
                                     platform=f["platform.name"], model=f["model.name"], dtype=f["model.dtype"],
                                     kv_dtype=f["kv.dtype"]), {})
    cf = dict(f, **{"candidate.backend": names[0]})
    blocks, trace = kernel_blocks(book, cf, names[0], "group")
    why = [f"{names[0]} serves {g.mamba_type} layers (fixed by the layer type: no priority list, no pin)"]
    return Choice(names[0], None, blocks, cf, ["builtin.fixed_backend"] + trace, why, {}, [], blocks)


def _choice(book, cf, name, kblocks, trace, why, rejected, warns, mblocks) -> Choice:
    cap = book.capabilities[name]
    version = cf.get("fa.version") if cap.flash_attn else None
    if cap.flash_attn:
        why.append(f"FlashAttention version {version} for head {cf['group.head_size']}")
    if cap.composite:
        why.append(f"{name} runs {cap.composite.general} for batches with image spans, {cap.composite.causal} for causal batches")
    return Choice(name, version, kblocks, cf, trace, why, rejected, warns, mblocks)


def validate(book: RuleBook, f: dict, name: str) -> tuple[list[Rejection], list[BlockSpec], list[str], dict, list[BlockSpec]]:
    """vLLM's validate_configuration as data: capability checks, then `reject` rules.
    Returns (reasons, kernel blocks for the group's KV spec, trace, candidate facts, kernel
    blocks without a spec: what vLLM checks a user block size against and prefers from).
    A composite validates each child alone (its rejections name the child); only the general
    (image-span) child sees the mm-prefix requirement."""
    cap: Capability = book.capabilities[name]
    cf = dict(f)
    cf["candidate.backend"] = name
    kblocks, trace = kernel_blocks(book, cf, name, "group")
    mblocks, _ = kernel_blocks(book, cf, name, "model")
    r: list[Rejection] = []
    device, cc = cf["platform.device"], (cf["platform.cc_major"], cf["platform.cc_minor"])
    plain = cap.composite is None
    if device not in cap.devices:
        r.append(rejection("device", name, capability="devices", value=device))
    if cap.package and not cf[f"platform.packages.{cap.package}"]:
        r.append(rejection("package", name, capability="package", value=cap.package))
    if not cap.head_sizes.allows(cf["group.head_size"]):
        r.append(rejection("head_size", name, capability="head_sizes", value=cf["group.head_size"]))
    if plain and cf["model.dtype"] not in cap.dtypes:
        r.append(rejection("dtype", name, capability="dtypes", value=cf["model.dtype"]))
    if plain and cf["kv.dtype"] not in cap.kv_cache_dtypes:
        r.append(rejection("kv_cache_dtype", name, capability="kv_cache_dtypes", value=cf["kv.dtype"]))
    if cf["kv.block_size"] is not None and not (mblocks and blk.supports(mblocks, cf["kv.block_size"])):
        r.append(rejection("block_size", name, capability="kernel_block_sizes", value=cf["kv.block_size"], kernel_blocks=tuple(mblocks)))
    if plain and cf["candidate.mm_prefix"] and not cap.mm_prefix:
        r.append(rejection("mm_prefix", name, capability="mm_prefix"))
    if cc[0] is not None and (
        (cap.min_compute_capability and cc < tuple(cap.min_compute_capability))
        or (cap.max_compute_capability and cc > tuple(cap.max_compute_capability))
    ):
        r.append(rejection("compute_capability", name, capability="compute_capability", value=cc))
    if plain and cf["group.sliding_window"] and not cap.sliding_window:
        r.append(rejection("sliding_window", name, capability="sliding_window"))
    if plain and (cf["group.kind"] == "mla") != cap.mla:
        r.append(rejection("mla" if cf["group.kind"] == "mla" else "non_mla", name, capability="mla"))
    if plain and cf.get("group.sinks") and not cap.sinks:
        r.append(rejection("sinks", name, capability="sinks"))
    if plain and bool(cf.get("group.sparse")) != cap.sparse:
        r.append(rejection("sparse" if cf.get("group.sparse") else "non_sparse", name, capability="sparse"))
    if not plain:
        for child in (cap.composite.general, cap.composite.causal):
            cfc = dict(f)
            if child == cap.composite.causal:
                cfc["candidate.mm_prefix"] = False
            r += validate(book, cfc, child)[0]
    for c in book.matching("reject", cf):
        r.append(rejection("rule", name, rule=c.id, reason=c.rule.reason))
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
