"""Pydantic models of the capability declarations (conf/capabilities) and the rules
(conf/rules, overlays): what each backend supports, and a rule's stage, matcher and effect."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from ..config.schema_types import CC, MAX_HEAD_DIM, Device, Int, ModelDtype, Strict
from ..config.vocab import FACTS

# ---------------------------------------------------------------- capabilities


class MultipleOf(Strict):
    multiple_of: Int(1, 4096)


BlockSpec = Int(1, 4096) | MultipleOf


class HeadSizes(Strict):
    multiple_of: Int(1, MAX_HEAD_DIM) = 1
    min: Int(1, MAX_HEAD_DIM) = 1
    max: Int(1, MAX_HEAD_DIM) | None = None
    only: list[Int(1, MAX_HEAD_DIM)] | None = Field(default=None, min_length=1, max_length=64)

    def allows(self, h: int) -> bool:
        if self.only is not None:
            return h in self.only
        return h % self.multiple_of == 0 and h >= self.min and (self.max is None or h <= self.max)


class Composite(Strict):
    """vLLM's composite backends: `general` serves batches with image spans (mm-prefix),
    `causal` every other batch; both must accept the layer group (each child is validated
    with its own capability and rules; only `general` sees the mm-prefix requirement)."""

    general: str
    causal: str
    # fixed kernel block candidates, kept where both children accept them; null: the
    # intersection of the children's kernel blocks
    kernel_block_sizes: list[Int(1, 4096)] | None = Field(default=None, min_length=1, max_length=64)


class Capability(Strict):
    """What a backend declares it supports (vLLM's ClassVars and predicates, as data)."""

    description: str = ""
    devices: list[Device]
    package: Literal["fa2", "fa3", "fa4", "flashinfer", "triton"] | None = None
    dtypes: list[ModelDtype]
    kv_cache_dtypes: list[str]
    head_sizes: HeadSizes = HeadSizes()
    kernel_block_sizes: list[BlockSpec] = Field(default=[MultipleOf(multiple_of=1)], min_length=1)
    min_compute_capability: CC | None = None
    max_compute_capability: CC | None = None
    sliding_window: bool = False
    mm_prefix: bool = False
    sinks: bool = False
    quant_query: bool = False
    per_head_quant_scales: bool = False  # FP8 descales per (sequence, KV head), not only per layer
    flash_attn: bool = False  # resolves a FlashAttention version per layer group
    mla: bool = False  # serves MLA layers only (vLLM's validate_configuration: use_mla must equal is_mla())
    sparse: bool = False  # serves sparse MLA only (use_sparse must equal is_sparse())
    # a state backend for mamba-kind layers of these types (vLLM maps each mamba layer type to one backend;
    # no selection, no pin applies)
    mamba_types: list[str] = []
    composite: Composite | None = None  # two backends behind one name, routed per batch


# ---------------------------------------------------------------- rules

Stage = Literal[
    "model", "fa_version", "priority", "reject", "kernel_block", "default_block", "cache_block",
    "preferred_block", "swa_block", "init", "quant_query", "descale", "spec", "draft", "warning",
]  # fmt: skip

# The effect field each stage needs (reject/warning rules need only their reason).
STAGE_EFFECT: dict[str, str | None] = {
    "model": "set",
    "fa_version": "flash_attn_version",
    "priority": "priority",
    "reject": None,
    "kernel_block": "kernel_block_sizes",
    "default_block": "default_block_size",
    "cache_block": "cache_block",
    "preferred_block": "preferred_block_size_min",
    "swa_block": "swa_block",
    "init": None,
    "quant_query": "quant_query",
    "descale": "descale",
    "spec": "copy_target_kv_scales",
    "draft": "draft_backend",
    "warning": None,
}
EFFECT_FIELDS = tuple(f for f in STAGE_EFFECT.values() if f)


class ModelForcing(Strict):
    flash_attn_version: Literal[2, 3, 4] | None = None
    backend: str | None = None


class FromFact(Strict):
    from_: str = Field(alias="from")

    @field_validator("from_")
    @classmethod
    def _a_fact(cls, v: str) -> str:
        if v not in FACTS:  # an unknown fact would read as null: the version silently unset
            raise ValueError(f"bad fact {v!r}; allowed: {', '.join(sorted(FACTS))}")
        return v


class Rule(Strict):
    stage: Stage
    reason: str = Field(min_length=1)
    when: dict[str, Any] = {}
    order: Int(-1000, 1000) = 0  # evaluation order inside a stage; ties keep declaration order
    enabled: bool = True
    set: ModelForcing | None = None
    flash_attn_version: Literal[2, 3, 4] | FromFact | None = None
    priority: list[str] | None = None
    kernel_block_sizes: list[BlockSpec] | None = Field(default=None, min_length=1)
    preferred_block_size_min: Int(1, 4096) | None = None
    # the engine's default cache block (vLLM's CacheConfig.DEFAULT_BLOCK_SIZE; 16 without a rule)
    default_block_size: Int(1, 4096) | None = None
    # how the cache block is chosen without a user block size: the preferred size of the
    # first layer's backend, or one size every distinct backend of the model accepts
    cache_block: Literal["first_layer", "common_over_backends"] | None = None
    # a sliding-window group's KV block: the backend's smallest kernel block, or the largest
    # kernel block whose page fits the cache block's page
    swa_block: Literal["smallest", "largest_within_cache_block"] | None = None
    quant_query: bool | None = None
    descale: Literal["none", "q_k_v", "k_v", "kv_dequant"] | None = None
    copy_target_kv_scales: bool | None = None
    # how MTP draft layers get their backend: the target group's (a composite: its causal
    # child), or a selection of their own as text-only layers under the config's pins
    draft_backend: Literal["target", "own_selection"] | None = None

    @model_validator(mode="after")
    def _one_effect(self) -> Rule:
        wanted = STAGE_EFFECT[self.stage]
        given = [f for f in EFFECT_FIELDS if f in self.model_fields_set]
        extra = [f for f in given if f != wanted]
        if extra:
            raise ValueError(f"stage '{self.stage}' takes no {extra}; its effect is {wanted or 'the reason alone'}")
        if wanted and wanted not in self.model_fields_set:
            raise ValueError(f"stage '{self.stage}' needs the effect field '{wanted}'")
        if wanted and wanted != "flash_attn_version" and getattr(self, wanted) is None:
            raise ValueError(f"stage '{self.stage}': '{wanted}' must not be null")
        if self.priority is not None and not self.priority:
            raise ValueError("priority must list at least one backend")
        return self


class Tombstone(Strict):
    """`{enabled: false}` on its own: an overlay disabling a rule that may not exist."""

    enabled: Literal[False]


def _rule_or_tombstone(v: Any) -> str:
    if isinstance(v, dict):
        return "tombstone" if set(v) == {"enabled"} and v["enabled"] is False else "rule"
    return "tombstone" if isinstance(v, Tombstone) else "rule"


RuleEntry = Annotated[
    Annotated[Rule, Tag("rule")] | Annotated[Tombstone, Tag("tombstone")],
    Discriminator(_rule_or_tombstone),
]
