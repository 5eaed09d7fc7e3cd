"""Pydantic v2 models of the composed Hydra config.

Hydra composes plain YAML; these models validate the result after
`OmegaConf.to_container(resolve=True)`. Unknown keys and wrong values fail with the
key, the bad value and the allowed values (see `errors.format_validation_error`).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ..config.schema_rules import (  # noqa: F401 - re-exported: the schema is one import
    EFFECT_FIELDS, STAGE_EFFECT, BlockSpec, Capability, FromFact, HeadSizes, ModelForcing, MultipleOf, Rule, RuleEntry,
    Stage, Tombstone,
)
from ..config.schema_types import (  # noqa: F401 - re-exported
    CC, MAX_EXPERTS, MAX_HEAD_DIM, MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, RULE_ID,
    Checkpoint, Device, Float, GpuModel, Int, KVDtype, ModelDtype, Name, Strict, _no_bool,
)
from ..config.hf_model import HFModelConfig
from ..config.layers import LayerSpec, gemma4_layers
from ..config.vocab import FP8_KV_DTYPES, GroupKind, LayerType, is_fp8

# ---------------------------------------------------------------- environment


class Packages(Strict):
    """Kernel packages installed on the platform: 'SM90 without FA4' is one override away."""

    fa2: bool = False
    fa3: bool = False
    fa4: bool = False
    flashinfer: bool = False
    triton: bool = False
    # FA3 from flash-attention's hopper/ build (not part of vLLM): an objective may choose it (vocab.ALT_BUILDS)
    fa3_upstream: bool = False
    # kselect's own Triton kernel (kernels/triton_paged.py, not vLLM's): an objective may choose it as
    # TRITON_ATTN+kselect (vocab.ALT_BUILDS); false keeps an objective to the kernels vLLM ships
    kselect_triton: bool = False


class Platform(Strict):
    name: Name
    vendor: Literal["nvidia", "amd", "intel", "cpu"]
    device: Device
    compute_capability: CC | None = None
    gpu_model: GpuModel | None = None  # key of measured conformance data, e.g. nvidia_h200 (a file name in conf/conformance/)
    packages: Packages = Packages()

    @model_validator(mode="after")
    def _cc_for_gpu(self) -> Platform:
        devices = {"nvidia": "cuda", "amd": "rocm", "intel": "xpu", "cpu": "cpu"}
        if devices[self.vendor] != self.device:
            raise ValueError(
                f"platform.device={self.device!r} does not match platform.vendor={self.vendor!r}; "
                f"allowed pairs: {', '.join(f'{v}/{d}' for v, d in devices.items())}"
            )
        if self.device == "cuda" and self.compute_capability is None:
            raise ValueError("platform.compute_capability is required for device 'cuda' (e.g. [9, 0])")
        if self.device == "cpu" and self.compute_capability is not None:
            raise ValueError("platform.compute_capability must be null for device 'cpu'")
        return self


class Drafter(Strict):
    checkpoint: Checkpoint | None = None  # the assistant checkpoint vLLM loads as the draft (HF repo id or folder)
    hidden_size: Int(1, MAX_HIDDEN)
    intermediate_size: Int(1, MAX_INTERMEDIATE)
    num_hidden_layers: Int(1, MAX_LAYERS)
    num_attention_heads: Int(1, MAX_HEADS)
    layer_types: list[LayerType] = Field(max_length=MAX_LAYERS)
    use_ordered_embeddings: bool = False
    num_centroids: Int(1, MAX_VOCAB) = 2048
    centroid_intermediate_top_k: Int(1, MAX_VOCAB) = 32

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

    name: Name
    architecture: Literal["gemma4"]
    dtype: ModelDtype
    multimodal: bool = False
    checkpoint: Checkpoint | None = None
    vocab_size: Int(1, MAX_VOCAB)
    hidden_size: Int(1, MAX_HIDDEN)
    intermediate_size: Int(1, MAX_INTERMEDIATE)
    num_hidden_layers: Int(1, MAX_LAYERS)
    num_attention_heads: Int(1, MAX_HEADS)
    num_key_value_heads: Int(1, MAX_HEADS)
    num_global_key_value_heads: Int(1, MAX_HEADS) | None = None
    head_dim: Int(1, MAX_HEAD_DIM)
    global_head_dim: Int(1, MAX_HEAD_DIM)
    sliding_window: Int(1, MAX_POSITIONS)
    full_attention_every: Int(1, MAX_LAYERS) | None = None
    layer_types: list[LayerType] | None = Field(default=None, max_length=MAX_LAYERS)
    final_logit_softcapping: Float(0, 1e6) | None = None
    rms_norm_eps: Float(0, 1) = 1e-6
    max_position_embeddings: Int(1, MAX_POSITIONS)
    rope_theta_sliding: Float(0, 1e12) = 10000.0
    rope_theta_full: Float(0, 1e12) = 1e6
    partial_rotary_factor_full: Float(0, 1) = 0.25
    hidden_size_per_layer_input: Int(0, MAX_HIDDEN) = 0
    vocab_size_per_layer_input: Int(0, MAX_VOCAB) = 0
    num_kv_shared_layers: Int(0, MAX_LAYERS) = 0
    use_double_wide_mlp: bool = False
    attention_k_eq_v: bool = False
    enable_moe_block: bool = False
    num_experts: Int(1, MAX_EXPERTS) | None = None
    top_k_experts: Int(1, MAX_EXPERTS) | None = None
    moe_intermediate_size: Int(1, MAX_INTERMEDIATE) | None = None
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
        if self.enable_moe_block and self.top_k_experts > self.num_experts:
            raise ValueError(f"model.top_k_experts={self.top_k_experts} exceeds model.num_experts={self.num_experts}")
        if self.attention_k_eq_v and self.num_global_key_value_heads and self.num_attention_heads % self.num_global_key_value_heads:
            raise ValueError("model.num_attention_heads must be a multiple of model.num_global_key_value_heads")
        types = self.resolved_layer_types()
        first_shared = self.num_hidden_layers - self.num_kv_shared_layers
        for t in sorted(set(types[first_shared:])):
            if t not in types[:first_shared]:
                raise ValueError(
                    f"model.num_kv_shared_layers={self.num_kv_shared_layers}: the shared layers reuse the cache of an "
                    f"earlier {t} layer, but the first {first_shared} layers have none (layer types from "
                    + ("model.layer_types" if self.layer_types is not None else f"model.full_attention_every={self.full_attention_every}")
                    + f"); allowed: at least one {t} layer before layer {first_shared}"
                )
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

    # the model interface the selector reads (HFModelConfig has the same)
    hf_architecture = property(lambda self: "gemma4")
    family = property(lambda self: "gemma4")
    mm_prefix = property(lambda self: self.multimodal)  # vision mode is the mm-prefix mask

    def layers(self) -> tuple[LayerSpec, ...]:
        return gemma4_layers(self)

    def model_head_size(self) -> int:
        return max(self.head_dim, self.global_head_dim)

    def gqa(self) -> bool:
        return self.num_attention_heads // self.num_key_value_heads > 1

    def num_query_heads(self) -> int:
        return self.num_attention_heads


AnyModel = Annotated[ModelConfig | HFModelConfig, Field(discriminator="architecture")]


class KVCache(Strict):
    dtype: KVDtype = "auto"
    scales: Literal["unit", "calibrated"] = "unit"
    block_size: Int(1, 1024) | None = None

    @model_validator(mode="after")
    def _scales_need_fp8(self) -> KVCache:
        if self.scales == "calibrated" and not is_fp8(self.dtype):
            raise ValueError(
                f"kv_cache.scales='calibrated' needs an FP8 kv_cache.dtype (one of {list(FP8_KV_DTYPES)}), got {self.dtype!r}"
            )
        return self

    @property
    def quantized(self) -> bool:
        return is_fp8(self.dtype)


class SpecDecode(Strict):
    method: Literal["none", "mtp"] = "none"
    num_speculative_tokens: Int(0, 16) = 0
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
    backend_per_kind: dict[GroupKind, str] = {}

# ---------------------------------------------------------------- objective


class OperatingPoint(Strict):
    batch: Int(1, 4096)  # no boolean where a number goes (true is not a batch of 1)
    context: Int(1, 1 << 22)  # decode: cached tokens per sequence; prefill: prompt tokens


class Objective(Strict):
    """What the selection optimizes: `vllm` = vLLM's rules alone (faithful); the others choose among the
    backends the rules find valid and conformance verified, by measured time (selector/measure/objective.py)."""

    name: Literal["vllm", "latency", "throughput", "capacity"] = "vllm"
    decode: OperatingPoint = OperatingPoint(batch=1, context=8192)
    prefill: OperatingPoint = OperatingPoint(batch=1, context=4096)
    per_phase: bool = True  # a group may prefill on one backend and decode on another
    # the request the layout serves: one prefill at `prefill`, then this many decode steps at `decode`
    # (0: prefill alone decides; selector/measure/objective.py)
    new_tokens: Annotated[int, BeforeValidator(_no_bool), Field(ge=0)] = 256
    tie: Annotated[float, BeforeValidator(_no_bool), Field(ge=0, lt=1)] = 0.03  # within this fraction of the fastest: priority order decides
    # a metric's noise band, per phase: the spread of two selections on identical kernels in the same end-to-end run
    # (bench/results/LOG.md, "Noise band"). A cell within it is a tie; the goal for a tie is "never slower
    # beyond the band" (kselect/measurement/e2e_report.py's objective table)
    noise_band: dict[Literal["decode", "prefill"], float] = {"decode": 0.02, "prefill": 0.035}


# ---------------------------------------------------------------- the whole config


class RuleSet(Strict):
    """Which vLLM a `rules` option models (named in every selection's environment)."""

    name: Name
    models: str = Field(min_length=1)


class OverlayRelation(Strict):
    """What an overlay undoes or stands in for; guard.py refuses lists that contradict it."""

    reverts: list[Name] = []
    replaces: list[Name] = []


class Release(Strict):
    """A rules option built as its base release plus overlays (selector/config/releases.py)."""

    name: Name
    chain: list[Name]  # oldest first, ending with this release
    overlays: dict[str, Name] = {}  # release overlay -> the release it applies on
    prs: dict[str, list[int]] = {}  # release overlay -> upstream vLLM PRs behind its rules


class KSelectConfig(Strict):
    ruleset: RuleSet
    release: Release | None = None  # set when the rules option is a release manifest
    # kernel library versions this rules option's vLLM ships (e.g. flashinfer: 0.7.3); conformance
    # and perf data measured with other versions warn (selector/evidence/kernel_versions.py)
    kernel_versions: dict[str, str] = {}
    # the model architectures this rules option models (Hugging Face names; gemma4: the bundled presets); a model of
    # another is refused, naming the release (older releases were proven for Gemma-4 only)
    architectures: list[str] = ["gemma4"]
    overlay_bases: dict[str, str] = {}  # overlay -> the rules option it was written for
    overlay_prs: dict[str, list[int]] = {}  # overlay -> the upstream vLLM PRs behind its rules
    overlay_relations: dict[str, OverlayRelation] = {}  # overlay -> what it reverts/replaces (overlay_order.py)
    platform: Platform
    model: AnyModel
    kv_cache: KVCache
    spec_decode: SpecDecode
    attention: AttentionPins
    capabilities: dict[str, Capability]
    rules: dict[str, RuleEntry]
    objective: Objective = Objective()
    overlays: dict[str, str] = {}  # applied overlays, in order -> one-line description
    output: Literal["table", "json", "markdown", "vllm"] = "table"
    verbose: bool = False
    strict: bool = False  # refuse a selection whose warnings say vLLM ignores a setting (exit 2)

    @field_validator("capabilities")
    @classmethod
    def _names(cls, v: dict[str, Capability]) -> dict[str, Capability]:
        if not v:
            raise ValueError("capabilities must declare at least one backend")
        return v

    @field_validator("rules")
    @classmethod
    def _addressable_ids(cls, v: dict[str, Any]) -> dict[str, Any]:
        # a rule id is one Hydra key segment, so `rules.<id>.enabled=false` is one override
        bad = [rid for rid in v if not RULE_ID.fullmatch(rid)]
        if bad:
            raise ValueError(
                f"rule id(s) {bad} cannot be addressed from the command line; an id is letters, digits, "
                "'_' and '-' (namespace-name, e.g. 'fa-kv_dtype_version_gate'), no '.'"
            )
        return v

    @model_validator(mode="after")
    def _cross_sections(self) -> KSelectConfig:
        self.check_cross_sections()
        self._check_rules_name_backends()
        self._check_overlay_bases()
        self._check_composites()
        return self

    def _check_overlay_bases(self) -> None:
        for ov, base in self.overlay_bases.items():
            if self.release is not None and self.release.overlays.get(ov) == base:
                continue  # a release overlay: applied on its base release (releases.py checks it)
            if base != self.ruleset.name:
                raise ValueError(
                    f"overlay={ov} was written for rules={base}, not rules={self.ruleset.name}; "
                    f"compose it as rules={base} overlay=[{ov}] (overlays patch rule ids of the base they name)"
                )

    def _check_composites(self) -> None:
        for name, cap in self.capabilities.items():
            for child in (cap.composite.general, cap.composite.causal) if cap.composite else ():
                if child not in self.capabilities or self.capabilities[child].composite:
                    raise ValueError(f"capabilities.{name}.composite names {child!r}, which is not a plain backend")

    def _check_rules_name_backends(self) -> None:
        names = sorted(self.capabilities)
        for rid, r in self.rules.items():
            for b in (r.priority or []) if isinstance(r, Rule) else []:
                if b not in self.capabilities:
                    raise ValueError(f"rules.{rid}.priority names unknown backend {b!r}; allowed: {names}")
            if isinstance(r, Rule) and r.set and r.set.backend and r.set.backend not in self.capabilities:
                raise ValueError(f"rules.{rid}.set.backend={r.set.backend!r} is not a backend; allowed: {names}")

    def check_cross_sections(self) -> None:
        """Checks that span the environment sections (pins name backends, MTP needs a drafter).
        Raises ValueError. Validation runs them; the matrix runs them on configs it assembles
        with model_copy (rules and capabilities come from one validated config there)."""
        names = sorted(self.capabilities)
        pins = {"attention.backend": self.attention.backend}
        pins |= {f"attention.backend_per_kind.{k}": b for k, b in self.attention.backend_per_kind.items()}
        for key, b in pins.items():
            if b != "auto" and b not in self.capabilities:
                raise ValueError(f"{key}={b!r} is not a backend; allowed: ['auto', {', '.join(map(repr, names))}]")
        if self.spec_decode.method == "mtp" and self.model.drafter is None:
            hf = getattr(self.model, "hf_config", None) or {}
            # the MTP-layer counts of vLLM 0.34.0's registry configs (bench/results/vllm/oracle_registry_0_34_0.configs.json)
            own = next((k for k in ("num_nextn_predict_layers", "num_mtp_layers")
                        if isinstance(hf.get(k), int) and hf[k] > 0), None)
            why = (f"its config's own MTP layers ({own}={hf[own]}) are not modelled: kselect models MTP as Gemma-4's "
                   "drafter (a Gemma-4 preset's model.drafter)" if own else "has none")
            raise ValueError(f"spec_decode.method='mtp' needs model.drafter (model {self.model.name!r}: {why}); "
                             "allowed: spec_decode=none for this model")

    def active_rules(self) -> dict[str, Rule]:
        return {rid: r for rid, r in self.rules.items() if isinstance(r, Rule) and r.enabled}

    def orphan_tombstones(self) -> list[str]:
        return [rid for rid, r in self.rules.items() if isinstance(r, Tombstone)]
