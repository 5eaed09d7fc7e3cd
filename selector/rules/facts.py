"""The facts a rule reads, as one frozen record: `Facts`, built once for the model (`base_facts`) and once per
layer group (`Facts.for_group`); a candidate backend, a FlashAttention version or a kernel-block question is a
new value made from it, never an edited copy. Rule files name facts by dotted names (vocab.FACTS):
`Facts.get("group.head_size")` reads the field `group.head_size`; a rule naming any other fact is refused when
the rules load (rules/matcher.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from operator import attrgetter

from pydantic import BaseModel

from ..config.schema import KSelectConfig, Packages
from ..config.vocab import FACTS, FIXED_KINDS, is_fp8, resolve_kv_dtype
from .groups import Group


@dataclass(frozen=True, slots=True)
class PlatformFacts:
    name: str
    vendor: str
    device: str
    cc_major: int | None
    cc_minor: int | None
    gpu_model: str | None
    packages: Packages


@dataclass(frozen=True, slots=True)
class ModelFacts:
    name: str
    architecture: str
    family: str
    dtype: str
    multimodal: bool  # the mm-prefix mask (model.mm_prefix: Gemma-4 vision mode, a Gemma-3 wrapper serving images)
    head_size: int
    mixed_head_sizes: bool
    gqa: bool
    num_heads: int
    softcap: bool = False  # the config sets attn_logit_softcapping (FA4's head-256 kernel takes none)
    # an MLA config's fields, which MLA backends' supports_combination checks (null: absent)
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    kv_lora_rank: int | None = None
    index_topk: int | None = None


@dataclass(frozen=True, slots=True)
class KvFacts:
    dtype: str
    quantized: bool
    scales: str
    block_size: int | None


@dataclass(frozen=True, slots=True)
class SpecFacts:
    method: str
    copy_target_kv_scales: bool | None = None  # resolved by the `spec` stage


@dataclass(frozen=True, slots=True)
class PinFacts:
    """The effective pins: the user's, or a model forcing's."""

    backend: str | None
    flash_attn_version: int | None


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """The layer group being selected for (all null at the model level)."""

    kind: str | None = None
    head_size: int | None = None
    num_kv_heads: int | None = None
    sliding_window: bool | None = None
    draft: bool | None = None
    sinks: bool | None = None
    sparse: bool | None = None
    mamba_type: str | None = None
    kv_block: int | None = None  # the group's KV block, once the blocks are known (init rules only)


@dataclass(frozen=True, slots=True)
class FlashAttentionFacts:
    head_size: int | None = None  # the head size a version is being resolved for
    version: int | None = None
    version_default: int | None = None
    version_model_head: int | None = None


@dataclass(frozen=True, slots=True)
class CandidateFacts:
    backend: str | None = None
    mm_prefix: bool | None = None


@dataclass(frozen=True, slots=True)
class KernelBlockFacts:
    context: str | None = None  # "group": asked with the group's KV spec; "model": without one
    head_size: int | None = None
    fa_version: int | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """Every fact a rule may read; hashable, so a stage's matches can be cached on it."""

    platform: PlatformFacts
    model: ModelFacts
    kv: KvFacts
    spec: SpecFacts
    pin: PinFacts
    group: GroupFacts = GroupFacts()
    fa: FlashAttentionFacts = FlashAttentionFacts()
    candidate: CandidateFacts = CandidateFacts()
    kb: KernelBlockFacts = KernelBlockFacts()
    _hash: int | None = dataclasses.field(default=None, compare=False, repr=False)

    def __hash__(self) -> int:
        """Kept once computed: a Facts is a memo key many times over (rulebook.py, candidates.choose_backend)."""
        h = self._hash
        if h is None:
            h = hash((self.platform, self.model, self.kv, self.spec, self.pin, self.group, self.fa, self.candidate, self.kb))
            object.__setattr__(self, "_hash", h)
        return h

    def get(self, name: str):
        """The fact a rule file names `name` (a vocab.FACTS key)."""
        return fact_reader(name)(self)

    def for_group(self, g: Group) -> Facts:
        group = GroupFacts(g.kind, g.head_size, g.num_kv_heads, g.window is not None, g.draft, g.sinks, g.sparse,
                           g.mamba_type)
        # a draft layer, and a composite's causal child (without_mm_prefix), never serve the mm-prefix mask
        return self._but(group=group, candidate=CandidateFacts(None, bool(self.model.multimodal) and not g.draft))

    def for_candidate(self, backend: str) -> Facts:
        return self._but(candidate=CandidateFacts(backend, self.candidate.mm_prefix))

    def with_kv_block(self, kv_block: int | None) -> Facts:
        """The group's KV block, once the blocks are known (the init rules run again with it)."""
        return self if kv_block is None else self._but(group=replace(self.group, kv_block=kv_block))

    def without_mm_prefix(self) -> Facts:
        return self._but(candidate=CandidateFacts(self.candidate.backend, False))

    def with_fa(self, **versions) -> Facts:
        return self._but(fa=replace(self.fa, **versions))

    def for_kernel_blocks(self, backend: str, context: str) -> Facts:
        """The question a backend's kernel block sizes answer, with the group's KV spec or (model) without."""
        at_model = context == "model"
        kb = KernelBlockFacts(context, self.model.head_size if at_model else self.group.head_size,
                              self.fa.version_model_head if at_model else self.fa.version)
        return self._but(candidate=CandidateFacts(backend, self.candidate.mm_prefix), kb=kb)

    def _but(self, group: GroupFacts | None = None, fa: FlashAttentionFacts | None = None,
             candidate: CandidateFacts | None = None, kb: KernelBlockFacts | None = None) -> Facts:
        """This record with some per-step parts replaced (dataclasses.replace, without its cost per call)."""
        return Facts(self.platform, self.model, self.kv, self.spec, self.pin, self.group if group is None else group,
                     self.fa if fa is None else fa, self.candidate if candidate is None else candidate,
                     self.kb if kb is None else kb)


def fact_reader(*names: str):
    """A function reading the named facts from a `Facts` (a tuple of values for several names)."""
    if not names:
        return _NO_FACTS
    if len(names) == 1:
        return _READERS[names[0]]
    return attrgetter(*names)


def _NO_FACTS(facts: Facts) -> tuple:
    return ()


def _record_paths(cls: type, prefix: str = "") -> set[str]:
    """The dotted names a record answers: its fields, and its nested records' fields."""
    fields = ({f.name: f.type for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls)
              else {n: f.annotation for n, f in cls.model_fields.items()})
    out: set[str] = set()
    for name, kind in fields.items():
        kind = _NESTED.get(kind, kind)
        nested = isinstance(kind, type) and (dataclasses.is_dataclass(kind) or issubclass(kind, BaseModel))
        out |= _record_paths(kind, f"{prefix}{name}.") if nested else {prefix + name}
    return out


_NESTED = {c.__name__: c for c in (PlatformFacts, ModelFacts, KvFacts, SpecFacts, PinFacts, GroupFacts,
                                    FlashAttentionFacts, CandidateFacts, KernelBlockFacts, Packages)}
_UNANSWERED = set(FACTS) - _record_paths(Facts)
if _UNANSWERED:  # the vocabulary and the record are declared apart: they must not drift
    raise ImportError(f"vocab.FACTS names facts the Facts record lacks: {sorted(_UNANSWERED)}")
_READERS = {name: attrgetter(name) for name in FACTS}


def base_facts(cfg: KSelectConfig) -> Facts:
    """The model-level facts of a config, before any rule ran."""
    p, m, kv, pins = cfg.platform, cfg.model, cfg.kv_cache, cfg.attention
    cc = p.compute_capability
    heads = {x.head_size for x in m.layers() if x.kind not in FIXED_KINDS}
    return Facts(
        platform=PlatformFacts(name=p.name, vendor=p.vendor, device=p.device, cc_major=cc[0] if cc else None,
                               cc_minor=cc[1] if cc else None, gpu_model=p.gpu_model, packages=p.packages),
        model=ModelFacts(name=m.name, architecture=m.hf_architecture, family=m.family, dtype=m.dtype,
                         multimodal=m.mm_prefix, head_size=m.model_head_size(), mixed_head_sizes=len(heads) > 1,
                         gqa=m.gqa(), num_heads=m.num_query_heads(), softcap=softcap(m), **mla_fields(m)),
        kv=KvFacts(dtype=kv_dtype_setting(cfg), quantized=is_fp8(kv_dtype_setting(cfg)), scales=kv.scales,
                   block_size=kv.block_size),
        spec=SpecFacts(method=cfg.spec_decode.method),
        pin=PinFacts(backend=None if pins.backend == "auto" else pins.backend,
                     flash_attn_version=pins.flash_attn_version),
    )


MLA_FIELDS = ("qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "index_topk")


def mla_fields(m) -> dict:
    """The MLA fields of the config vLLM's MLA backends read in supports_combination (null where absent or not a
    config.json model)."""
    f = m.text_fields() if hasattr(m, "text_fields") else None
    return {k: getattr(f, k, None) for k in MLA_FIELDS}


def softcap(m) -> bool:
    """The config sets attn_logit_softcapping (a config.json model; Gemma-4 presets do not)."""
    f = m.text_fields() if hasattr(m, "text_fields") else None
    return bool(getattr(f, "attn_logit_softcapping", None))


def resolved_kv_dtype(cfg: KSelectConfig) -> str:
    return resolve_kv_dtype(kv_dtype_setting(cfg), cfg.model.dtype)


def kv_dtype_setting(cfg: KSelectConfig) -> str:
    """The kv_cache dtype vLLM's attention layers take: as configured, or for `auto` the one a quantized
    checkpoint's quantization_config names (selector/config/hf_quant.py)."""
    ckv = checkpoint_kv(cfg)
    if ckv is not None and ckv.dtype is not None and cfg.kv_cache.dtype == "auto":
        return ckv.dtype
    return cfg.kv_cache.dtype


def checkpoint_kv(cfg: KSelectConfig):
    """The model checkpoint's KV-cache quantization (hf_quant.CheckpointKV), or None."""
    return getattr(cfg.model, "checkpoint_kv", None)
