"""Candidates for one layer group: the FlashAttention version, and vLLM's validate_configuration as data
(capability checks, then `reject` rules), each refusal a `records.Rejection`. `resolve.py` orders the steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import blocks as blk
from ..base.errors import SelectionError
from ..outputs.records import BlockSizePrecluded, Failure, Rejection, rejection
from ..rules.rulebook import RuleBook
from ..config.schema import BlockSpec, Capability, KSelectConfig
from ..config.vocab import FIXED_KINDS, group_id
from .facts import Facts
from .groups import Group


@dataclass
class Choice:
    """The backend chosen for a group, with the facts it was chosen under; later steps add to its trace."""

    backend: str
    version: int | None
    kernel_blocks: list[BlockSpec]
    facts: Facts
    trace: list[str]
    reasons: list[str]
    rejected: dict[str, list[Rejection]] = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    model_kernel_blocks: list[BlockSpec] = field(default_factory=list)  # without a KV spec: model-level head size


@dataclass(frozen=True)
class Validation:
    """One backend validated for a group. `kernel_blocks` are asked with the group's KV spec,
    `model_kernel_blocks` without one (what vLLM checks a user block size against and prefers from)."""

    backend: str
    rejections: list[Rejection]
    kernel_blocks: list[BlockSpec]
    trace: list[str]
    facts: Facts  # the group's facts with this backend as the candidate
    model_kernel_blocks: list[BlockSpec]


# ---------------------------------------------------------------- FlashAttention version


def fa_version(book: RuleBook, facts: Facts, head: int | None) -> tuple[int | None, list[str]]:
    """Apply the `fa_version` rules in order; each matching rule overrides the last."""
    key = ("fa_version", head, book.read("fa_version", facts))  # fa.head_size, fa.version: reset below
    version, trace = book.memo(key, lambda: _fa_version(book, facts, head))
    return version, list(trace)


def _fa_version(book: RuleBook, facts: Facts, head: int | None) -> tuple[int | None, tuple[str, ...]]:
    f = facts.with_fa(head_size=head, version=None)
    trace = []
    for c in book.stage("fa_version"):
        if c.pred(f):
            v = c.rule.flash_attn_version
            f = f.with_fa(version=f.get(v.from_) if hasattr(v, "from_") else v)
            trace.append(c.id)
    return f.fa.version, tuple(trace)


def with_fa_versions(book: RuleBook, facts: Facts, head_size: int) -> tuple[Facts, list[str]]:
    """The group's facts with its FlashAttention versions: at its head size (traced), with no head
    size, and at the model-level head size."""
    version, trace = fa_version(book, facts, head_size)
    facts = facts.with_fa(version=version)
    facts = facts.with_fa(version_default=fa_version(book, facts, None)[0])
    return facts.with_fa(version_model_head=fa_version(book, facts, facts.model.head_size)[0]), trace


# ---------------------------------------------------------------- backend choice


def choose_backend(cfg: KSelectConfig, book: RuleBook, facts: Facts, g: Group) -> Choice:
    """The group's backend (or the SelectionError refusing it), kept per book on all it reads: an objective's
    search asks for one group's pin again under every choice of the other groups. A fresh copy each time:
    later steps add to a choice's lists."""
    att = cfg.attention
    key = ("choice", facts, g.kind, g.head_size, g.num_kv_heads, g.window, g.draft, g.sinks, g.sparse, g.mamba_type,
           att.backend_per_kind.get(g.kind), att.backend, cfg.kv_cache.block_size)
    hit = book.memo(key, lambda: _outcome(cfg, book, facts, g))
    if isinstance(hit, SelectionError):
        raise hit.with_traceback(None)
    return Choice(hit.backend, hit.version, list(hit.kernel_blocks), hit.facts, list(hit.trace), list(hit.reasons),
                  {k: list(v) for k, v in hit.rejected.items()}, list(hit.warnings), list(hit.model_kernel_blocks))


def _outcome(cfg: KSelectConfig, book: RuleBook, facts: Facts, g: Group) -> Choice | SelectionError:
    try:
        return _choose_backend(cfg, book, facts, g)
    except SelectionError as e:
        return e


def _choose_backend(cfg: KSelectConfig, book: RuleBook, facts: Facts, g: Group) -> Choice:
    f = facts.for_group(g)
    if g.kind in FIXED_KINDS:
        return state_backend(book, f, g)
    fa_trace: list[str] = []
    if any(cap.flash_attn for cap in book.capabilities.values()):
        f, fa_trace = with_fa_versions(book, f, g.head_size)
    pin, pin_source = _group_pin(cfg, f, g)
    if pin is not None:
        return _pinned_choice(book, f, g, pin, pin_source, fa_trace)
    return _priority_choice(cfg, book, f, g, fa_trace)


def _group_pin(cfg: KSelectConfig, f: Facts, g: Group) -> tuple[str | None, str]:
    """The backend pinned for the group, and which setting pinned it."""
    per_kind = cfg.attention.backend_per_kind.get(g.kind)
    if per_kind is not None and per_kind != "auto":  # `auto` for one group: that group is not pinned
        return per_kind, f"attention.backend_per_kind.{g.kind}"
    if f.pin.backend is not None and cfg.attention.backend != "auto":
        return f.pin.backend, "attention.backend"
    return f.pin.backend, "model forcing"


def _pinned_choice(book: RuleBook, f: Facts, g: Group, pin: str, pin_source: str, fa_trace: list[str]) -> Choice:
    """An explicit pin, validated alone: no fallback."""
    v = validate(book, f, pin)
    if v.rejections:
        raise SelectionError(Failure(code="pin_invalid", backend=pin, pin_source=pin_source,
                                     group=group_id(g.kind, g.draft), head=g.head_size), {pin: v.rejections})
    why = [f"{pin} pinned by {pin_source}; validated alone (no fallback)"]
    return _choice(book, v, f"builtin.pin:{pin}", fa_trace, why)


def _priority_choice(cfg: KSelectConfig, book: RuleBook, f: Facts, g: Group, fa_trace: list[str]) -> Choice:
    """The first valid backend of the last matching `priority` rule's list; every refusal kept."""
    prio_rules = book.matching("priority", f)
    if not prio_rules:
        raise SelectionError(Failure(code="no_priority_rule", platform=f.platform.name, device=f.platform.device))
    prio = prio_rules[-1]
    rejected: dict[str, list[Rejection]] = {}
    for name in prio.rule.priority:
        v = validate(book, f, name)
        if v.rejections:
            rejected[name] = v.rejections
            continue
        why = [f"{name} is the first valid backend of {prio.rule.priority} ({prio.rule.reason}) [{prio.id}]"]
        ch = _choice(book, v, prio.id, fa_trace, why, rejected)
        ch.warnings.extend(_block_size_precluded(cfg, g, rejected))
        return ch
    raise SelectionError(_no_valid_backend(f, g), rejected)


def _block_size_precluded(cfg: KSelectConfig, g: Group, rejected: dict[str, list[Rejection]]) -> list[BlockSizePrecluded]:
    """A user block size that alone ruled out backends before the chosen one."""
    if cfg.kv_cache.block_size is None:
        return []
    blocked = tuple(n for n, r in rejected.items() if len(r) == 1 and r[0].code == "block_size")
    if not blocked:
        return []
    return [BlockSizePrecluded(group=group_id(g.kind, g.draft), block_size=cfg.kv_cache.block_size, backends=blocked)]


def _no_valid_backend(f: Facts, g: Group) -> Failure:
    return Failure(code="no_valid_backend", group=group_id(g.kind, g.draft), head=g.head_size, platform=f.platform.name,
                   model=f.model.name, dtype=f.model.dtype, kv_dtype=f.kv.dtype)


def state_backend(book: RuleBook, f: Facts, g: Group) -> Choice:
    """A fixed-kind group's backend: the one declared for its layer type (vLLM maps each mamba layer type, and the
    V3.2 indexer cache, to one backend, with no priority list and no attention pin)."""
    names = [n for n, cap in book.capabilities.items() if g.mamba_type in cap.mamba_types]
    if not names:
        raise SelectionError(_no_valid_backend(f, g), {})
    candidate = f.for_candidate(names[0])
    blocks, trace = kernel_blocks(book, candidate, names[0], "group")
    why = [f"{names[0]} serves {g.mamba_type} layers (fixed by the layer type: no priority list, no pin)"]
    return Choice(names[0], None, blocks, candidate, ["builtin.fixed_backend"] + trace, why, model_kernel_blocks=blocks)


def _choice(book: RuleBook, v: Validation, decided_by: str, fa_trace: list[str], why: list[str],
            rejected: dict[str, list[Rejection]] | None = None) -> Choice:
    """The choice of a validated backend; `decided_by` (the pin or the priority rule) heads its trace."""
    cap = book.capabilities[v.backend]
    version = v.facts.fa.version if cap.flash_attn else None
    if cap.flash_attn:
        why.append(f"FlashAttention version {version} for head {v.facts.group.head_size}")
    if cap.composite:
        why.append(f"{v.backend} runs {cap.composite.general} for batches with image spans, "
                   f"{cap.composite.causal} for causal batches")
    trace = [decided_by] + v.trace + (fa_trace if cap.flash_attn else [])
    return Choice(v.backend, version, v.kernel_blocks, v.facts, trace, why, rejected or {},
                  model_kernel_blocks=v.model_kernel_blocks)


def validate(book: RuleBook, f: Facts, name: str) -> Validation:
    """vLLM's validate_configuration as data: capability checks, then `reject` rules. A composite
    validates each child alone (its rejections name the child); only the general (image-span) child
    sees the mm-prefix requirement."""
    cap: Capability = book.capabilities[name]
    candidate = f.for_candidate(name)
    blocks, trace = kernel_blocks(book, candidate, name, "group")
    model_blocks, _ = kernel_blocks(book, candidate, name, "model")
    r = _capability_rejections(cap, name, candidate, model_blocks)
    if cap.composite is not None:
        r += validate(book, f, cap.composite.general).rejections
        r += validate(book, f.without_mm_prefix(), cap.composite.causal).rejections
    r += [rejection("rule", name, rule=c.id, reason=c.rule.reason) for c in book.matching("reject", candidate)]
    return Validation(name, r, blocks, trace, candidate, model_blocks)


def _capability_rejections(cap: Capability, name: str, f: Facts, model_blocks: list[BlockSpec]) -> list[Rejection]:
    """What the backend's declared capabilities refuse (a composite's dtype, mask and layer-shape checks are
    its children's)."""
    p, g, plain = f.platform, f.group, cap.composite is None
    cc = (p.cc_major, p.cc_minor)
    user_block = f.kv.block_size
    checks = [
        (p.device not in cap.devices, "device", "devices", p.device),
        (bool(cap.package) and not getattr(p.packages, cap.package), "package", "package", cap.package),
        (not cap.head_sizes.allows(g.head_size), "head_size", "head_sizes", g.head_size),
        (plain and f.model.dtype not in cap.dtypes, "dtype", "dtypes", f.model.dtype),
        (plain and f.kv.dtype not in cap.kv_cache_dtypes, "kv_cache_dtype", "kv_cache_dtypes", f.kv.dtype),
    ]
    r = [rejection(code, name, capability=capability, value=value) for failed, code, capability, value in checks if failed]
    if user_block is not None and not (model_blocks and blk.supports(model_blocks, user_block)):
        r.append(rejection("block_size", name, capability="kernel_block_sizes", value=user_block,
                           kernel_blocks=tuple(model_blocks)))
    if plain and f.candidate.mm_prefix and not cap.mm_prefix:
        r.append(rejection("mm_prefix", name, capability="mm_prefix"))
    if cc[0] is not None and ((cap.min_compute_capability and cc < tuple(cap.min_compute_capability))
                              or (cap.max_compute_capability and cc > tuple(cap.max_compute_capability))):
        r.append(rejection("compute_capability", name, capability="compute_capability", value=cc))
    if plain:
        r += _layer_shape_rejections(cap, name, g)
    return r


def _layer_shape_rejections(cap: Capability, name: str, g) -> list[Rejection]:
    """Sliding window, MLA, sinks and sparsity: a plain backend serves the group's layers or refuses them."""
    r = []
    if g.sliding_window and not cap.sliding_window:
        r.append(rejection("sliding_window", name, capability="sliding_window"))
    if (g.kind == "mla") != cap.mla:
        r.append(rejection("mla" if g.kind == "mla" else "non_mla", name, capability="mla"))
    if g.sinks and not cap.sinks:
        r.append(rejection("sinks", name, capability="sinks"))
    if bool(g.sparse) != cap.sparse:
        r.append(rejection("sparse" if g.sparse else "non_sparse", name, capability="sparse"))
    return r


def kernel_blocks(book: RuleBook, facts: Facts, name: str, context: str) -> tuple[list[BlockSpec], list[str]]:
    """A backend's kernel block sizes. vLLM asks with a group's KV spec (its head size) when it
    sizes and splits pages, and without one (the model-level head size) when it checks a user
    block size and picks the preferred one: rules read `kb.head_size` / `kb.fa_version`."""
    cap = book.capabilities[name]
    if cap.composite is not None:
        kids = [kernel_blocks(book, facts, child, context)[0] for child in (cap.composite.general, cap.composite.causal)]
        if cap.composite.kernel_block_sizes is not None:
            blocks = [b for b in cap.composite.kernel_block_sizes if all(blk.supports(k, b) for k in kids)]
        else:
            blocks = blk.intersect(*kids)
    else:
        blocks = list(cap.kernel_block_sizes)
    trace = []
    for c in book.matching("kernel_block", facts.for_kernel_blocks(name, context)):
        blocks = list(c.rule.kernel_block_sizes)
        trace.append(c.id)
    return blocks, trace
