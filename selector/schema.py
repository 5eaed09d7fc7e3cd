"""Pydantic v2 models of the composed Hydra config.

Hydra composes plain YAML; these models validate the result after
`OmegaConf.to_container(resolve=True)`. Unknown keys and wrong values fail with the
key, the bad value and the allowed values (see `errors.format_validation_error`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

ModelDtype = Literal["bfloat16", "float16", "float32"]
KVDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")
LayerType = Literal["sliding_attention", "full_attention"]
GroupKindName = Literal["sliding_window", "full_attention"]
Device = Literal["cuda", "rocm", "xpu", "cpu"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- environment


class Packages(Strict):
    """Kernel packages installed on the platform: 'SM90 without FA4' is one override away."""

    fa2: bool = False
    fa3: bool = False
    fa4: bool = False
    flashinfer: bool = False
    triton: bool = False


class Platform(Strict):
    name: str
    vendor: Literal["nvidia", "amd", "intel", "cpu"]
    device: Device
    compute_capability: tuple[int, int] | None = None
    gpu_model: str | None = None  # key of measured conformance data, e.g. nvidia_h200
    packages: Packages = Packages()

    @model_validator(mode="after")
    def _cc_for_gpu(self) -> Platform:
        if self.device == "cuda" and self.compute_capability is None:
            raise ValueError("platform.compute_capability is required for device 'cuda' (e.g. [9, 0])")
        if self.device == "cpu" and self.compute_capability is not None:
            raise ValueError("platform.compute_capability must be null for device 'cpu'")
        return self


class Drafter(Strict):
    checkpoint: str | None = None  # the assistant checkpoint vLLM loads as the draft (HF repo id or folder)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    layer_types: list[LayerType]
    use_ordered_embeddings: bool = False
    num_centroids: int = Field(default=2048, gt=0)
    centroid_intermediate_top_k: int = Field(default=32, gt=0)

    @model_validator(mode="after")
    def _layers(self) -> Drafter:
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"model.drafter.layer_types has {len(self.layer_types)} entries but "
                f"model.drafter.num_hidden_layers is {self.num_hidden_layers}"
            )
        return self


class ModelConfig(Strict):
    """A Gemma-4 text decoder (field names follow HF's Gemma4TextConfig)."""

    name: str
    architecture: Literal["gemma4"]
    dtype: ModelDtype
    multimodal: bool = False
    checkpoint: str | None = None
    vocab_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    num_global_key_value_heads: int | None = Field(default=None, gt=0)
    head_dim: int = Field(gt=0)
    global_head_dim: int = Field(gt=0)
    sliding_window: int = Field(gt=0)
    full_attention_every: int | None = Field(default=None, gt=0)
    layer_types: list[LayerType] | None = None
    final_logit_softcapping: float | None = None
    rms_norm_eps: float = Field(default=1e-6, gt=0)
    max_position_embeddings: int = Field(gt=0)
    rope_theta_sliding: float = Field(default=10000.0, gt=0)
    rope_theta_full: float = Field(default=1e6, gt=0)
    partial_rotary_factor_full: float = Field(default=0.25, gt=0, le=1)
    hidden_size_per_layer_input: int = Field(default=0, ge=0)
    vocab_size_per_layer_input: int = Field(default=0, ge=0)
    num_kv_shared_layers: int = Field(default=0, ge=0)
    use_double_wide_mlp: bool = False
    attention_k_eq_v: bool = False
    enable_moe_block: bool = False
    num_experts: int | None = None
    top_k_experts: int | None = None
    moe_intermediate_size: int | None = None
    drafter: Drafter | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.layer_types is None and self.full_attention_every is None:
            raise ValueError("model needs layer_types or full_attention_every")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"model.layer_types has {len(self.layer_types)} entries but "
                f"model.num_hidden_layers is {self.num_hidden_layers}"
            )
        if self.num_kv_shared_layers >= self.num_hidden_layers:
            raise ValueError("model.num_kv_shared_layers must be smaller than model.num_hidden_layers")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("model.num_attention_heads must be a multiple of model.num_key_value_heads")
        if self.enable_moe_block and not (self.num_experts and self.top_k_experts and self.moe_intermediate_size):
            raise ValueError("model.enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size")
        return self

    def resolved_layer_types(self) -> list[str]:
        if self.layer_types is not None:
            return list(self.layer_types)
        n, every = self.num_hidden_layers, self.full_attention_every
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
        types[-1] = "full_attention"  # Gemma-4 always ends on a full layer
        return types

    def global_kv_heads(self) -> int:
        if self.attention_k_eq_v and self.num_global_key_value_heads:
            return self.num_global_key_value_heads
        return self.num_key_value_heads


class KVCache(Strict):
    dtype: KVDtype = "auto"
    scales: Literal["unit", "calibrated"] = "unit"
    block_size: int | None = Field(default=None, ge=1, le=1024)

    @model_validator(mode="after")
    def _scales_need_fp8(self) -> KVCache:
        if self.scales == "calibrated" and self.dtype not in FP8_KV:
            raise ValueError(
                f"kv_cache.scales='calibrated' needs an FP8 kv_cache.dtype (one of {list(FP8_KV)}), got {self.dtype!r}"
            )
        return self

    @property
    def quantized(self) -> bool:
        return self.dtype in FP8_KV


class SpecDecode(Strict):
    method: Literal["none", "mtp"] = "none"
    num_speculative_tokens: int = Field(default=0, ge=0, le=16)
    # null: decided by the rules (stage `spec`); true/false: a user pin.
    copy_target_kv_scales: bool | None = None

    @model_validator(mode="after")
    def _tokens(self) -> SpecDecode:
        if self.method == "mtp" and self.num_speculative_tokens < 1:
            raise ValueError("spec_decode.num_speculative_tokens must be >= 1 with spec_decode.method='mtp'")
        if self.method == "none" and self.num_speculative_tokens:
            raise ValueError("spec_decode.num_speculative_tokens must be 0 with spec_decode.method='none'")
        return self


class AttentionPins(Strict):
    backend: str = "auto"
    flash_attn_version: Literal[2, 3, 4] | None = None
    backend_per_kind: dict[GroupKindName, str] = {}


# ---------------------------------------------------------------- capabilities


class MultipleOf(Strict):
    multiple_of: int = Field(gt=0, le=4096)


BlockSpec = Annotated[int, Field(gt=0, le=4096)] | MultipleOf


class HeadSizes(Strict):
    multiple_of: int = Field(default=1, gt=0)
    min: int = Field(default=1, gt=0)
    max: int | None = None
    only: list[int] | None = None

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
    kernel_block_sizes: list[Annotated[int, Field(gt=0, le=4096)]] | None = None

class Capability(Strict):
    """What a backend declares it supports (vLLM's ClassVars and predicates, as data)."""

    description: str = ""
    devices: list[Device]
    package: Literal["fa2", "fa3", "fa4", "flashinfer", "triton"] | None = None
    dtypes: list[ModelDtype]
    kv_cache_dtypes: list[str]
    head_sizes: HeadSizes = HeadSizes()
    kernel_block_sizes: list[BlockSpec] = Field(default=[MultipleOf(multiple_of=1)], min_length=1)
    min_compute_capability: tuple[int, int] | None = None
    max_compute_capability: tuple[int, int] | None = None
    sliding_window: bool = False
    mm_prefix: bool = False
    sinks: bool = False
    quant_query: bool = False
    per_head_quant_scales: bool = False  # FP8 descales per (sequence, KV head), not only per layer
    flash_attn: bool = False  # resolves a FlashAttention version per layer group
    composite: Composite | None = None  # two backends behind one name, routed per batch



# ---------------------------------------------------------------- rules

Stage = Literal[
    "model", "fa_version", "priority", "reject", "kernel_block", "cache_block",
    "preferred_block", "swa_block", "init", "quant_query", "descale", "spec", "warning",
]  # fmt: skip

# The effect field each stage needs (reject/warning rules need only their reason).
STAGE_EFFECT: dict[str, str | None] = {
    "model": "set",
    "fa_version": "flash_attn_version",
    "priority": "priority",
    "reject": None,
    "kernel_block": "kernel_block_sizes",
    "cache_block": "cache_block",
    "preferred_block": "preferred_block_size_min",
    "swa_block": "swa_block",
    "init": None,
    "quant_query": "quant_query",
    "descale": "descale",
    "spec": "copy_target_kv_scales",
    "warning": None,
}
EFFECT_FIELDS = tuple(f for f in STAGE_EFFECT.values() if f)


class ModelForcing(Strict):
    flash_attn_version: Literal[2, 3, 4] | None = None
    backend: str | None = None


class FromFact(Strict):
    from_: str = Field(alias="from")


class Rule(Strict):
    stage: Stage
    reason: str = Field(min_length=1)
    when: dict[str, Any] = {}
    order: int = 0  # evaluation order inside a stage; ties keep declaration order
    enabled: bool = True
    set: ModelForcing | None = None
    flash_attn_version: Literal[2, 3, 4] | FromFact | None = None
    priority: list[str] | None = None
    kernel_block_sizes: list[BlockSpec] | None = Field(default=None, min_length=1)
    preferred_block_size_min: int | None = Field(default=None, gt=0)
    # how the cache block is chosen without a user block size: the preferred size of the
    # first layer's backend, or one size every distinct backend of the model accepts
    cache_block: Literal["first_layer", "common_over_backends"] | None = None
    # a sliding-window group's KV block: the backend's smallest kernel block, or the largest
    # kernel block whose page fits the cache block's page
    swa_block: Literal["smallest", "largest_within_cache_block"] | None = None
    quant_query: bool | None = None
    descale: Literal["none", "q_k_v", "k_v", "kv_dequant"] | None = None
    copy_target_kv_scales: bool | None = None

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


# ---------------------------------------------------------------- the whole config


class RuleSet(Strict):
    """Which vLLM a `rules` option models (named in every selection's environment)."""

    name: str
    models: str = Field(min_length=1)


class KSelectConfig(Strict):
    ruleset: RuleSet
    overlay_bases: dict[str, str] = {}  # overlay -> the rules option it was written for
    platform: Platform
    model: ModelConfig
    kv_cache: KVCache
    spec_decode: SpecDecode
    attention: AttentionPins
    capabilities: dict[str, Capability]
    rules: dict[str, RuleEntry]
    overlays: dict[str, str] = {}  # applied overlays, in order -> one-line description
    output: Literal["table", "json", "markdown", "vllm"] = "table"
    verbose: bool = False

    @field_validator("capabilities")
    @classmethod
    def _names(cls, v: dict[str, Capability]) -> dict[str, Capability]:
        if not v:
            raise ValueError("capabilities must declare at least one backend")
        return v

    @model_validator(mode="after")
    def _pins_exist(self) -> KSelectConfig:
        names = sorted(self.capabilities)
        pins = {"attention.backend": self.attention.backend}
        pins |= {f"attention.backend_per_kind.{k}": b for k, b in self.attention.backend_per_kind.items()}
        for key, b in pins.items():
            if b != "auto" and b not in self.capabilities:
                raise ValueError(f"{key}={b!r} is not a backend; allowed: ['auto', {', '.join(map(repr, names))}]")
        for rid, r in self.rules.items():
            for b in (r.priority or []) if isinstance(r, Rule) else []:
                if b not in self.capabilities:
                    raise ValueError(f"rules.{rid}.priority names unknown backend {b!r}; allowed: {names}")
            if isinstance(r, Rule) and r.set and r.set.backend and r.set.backend not in self.capabilities:
                raise ValueError(f"rules.{rid}.set.backend={r.set.backend!r} is not a backend; allowed: {names}")
        for ov, base in self.overlay_bases.items():
            if base != self.ruleset.name:
                raise ValueError(
                    f"overlay={ov} was written for rules={base}, not rules={self.ruleset.name}; "
                    f"compose it as rules={base} overlay=[{ov}] (overlays patch rule ids of the base they name)"
                )
        for name, cap in self.capabilities.items():
            for child in (cap.composite.general, cap.composite.causal) if cap.composite else ():
                if child not in self.capabilities or self.capabilities[child].composite:
                    raise ValueError(f"capabilities.{name}.composite names {child!r}, which is not a plain backend")
        if self.spec_decode.method == "mtp" and self.model.drafter is None:
            raise ValueError(f"spec_decode.method='mtp' needs model.drafter (model {self.model.name!r} has none)")
        return self

    def active_rules(self) -> dict[str, Rule]:
        return {rid: r for rid, r in self.rules.items() if isinstance(r, Rule) and r.enabled}

    def orphan_tombstones(self) -> list[str]:
        return [rid for rid, r in self.rules.items() if isinstance(r, Tombstone)]
