"""The table of architectures kselect derives layers for (conf/architectures/vllm_0_34_0.yaml): per architecture, only
what its vLLM model class does differently from the generic derivation (selector/config/hf_arch.py), each row naming
the vLLM 0.34.0 model file it mirrors. Read once, validated strictly."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

# a layer's kind once its pattern token is read: the group kinds of an attention or state layer, or `skip` (an MLP or
# MoE block: no cache) or `parallel` (a full-attention and a mamba mixer side by side in one layer, FalconH1)
LayerKind = Literal["full_attention", "sliding_window", "chunked_local", "mamba", "skip", "parallel"]
Pattern = Literal["layer_types", "hybrid_override_pattern", "layers_block_type", "attn_layer_period",
                  "attn_layer_indices", "no_rope_layers", "even_layers_slide", "none"]
MambaKind = Literal["mamba1", "mamba2", "gdn", "short_conv"]


class EveryNth(BaseModel):
    """transformers' default pattern where the config has none: every `field`-th layer (1-based) is `token`,
    the others `rest` (Gemma-3: every 6th full; Qwen3-Next: every 4th full)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    field: StrictStr
    default: StrictInt = Field(ge=1)
    token: StrictStr
    rest: StrictStr


class Wraps(BaseModel):
    """A multimodal wrapper's language model (vLLM builds it with init_vllm_registered_model): which row of the table its
    KV-cache layers follow, and where its config is. The vision tower is no KV-cache layer (docs/models.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the row the wrapper names (`architectures=[...]`); None: the text config's own `architectures`, else its
    # model_type through the table's text_model_types (vLLM's VllmConfig.with_hf_config)
    language_model: StrictStr | None = None
    # required: `text_config` must be there; or_top_level: the wrapper's config class builds its text config from the
    # top-level fields where there is none (Qwen2-VL's published configs)
    text_config: Literal["required", "or_top_level"] = "required"
    model_type: StrictStr | None = None  # the text config's model_type where it states none (the config class's)


class Arch(BaseModel):
    """One architecture's differences. Defaults: every layer an attention layer of its config's head size and KV heads,
    `layer_types` naming sliding layers, the config's sliding window where layer_types is absent (per-layer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: StrictStr  # the vLLM 0.34.0 model file this row mirrors (vllm/model_executor/models/<name>.py)
    family: StrictStr  # how docs/models.md groups it
    attention: Literal["gqa", "mla"] = "gqa"
    pattern: tuple[Pattern, ...] = ("layer_types",)  # the first the config states is read
    kinds: dict[str, LayerKind] = Field(default_factory=lambda: {"full_attention": "full_attention",
                                                                 "sliding_attention": "sliding_window"})
    every: EveryNth | None = None  # the pattern transformers fills in when the config has none
    # per_layer: a layer_types sliding layer gets the window (per_layer_sliding_window); global: the model passes no
    # per-layer window, so vLLM's cache-wide window applies to every layer, set only when layer_types is absent or
    # all sliding (engine/arg_utils.py create_engine_config)
    window: Literal["per_layer", "global", "none"] = "per_layer"
    window_offset: StrictInt = 0  # added to sliding_window (Cohere2 attends window + 1 tokens)
    uniform_window: bool = False  # refuses a partial window (Qwen2: "Sliding window for some but all layers")
    sinks: Literal["none", "all", "sliding"] = "none"  # which attention layers have sinks
    sinks_if: StrictStr | None = None  # a config flag (hf_fields.TextFields) that switches them on
    sinks_if_absent: Literal["on", "off", "layer_types"] = "off"  # the flag's value where the config omits it
    # hidden: the class ignores head_dim (hidden / heads); qk: qk_nope_head_dim + qk_rope_head_dim (MiniCPM3)
    head_dim: Literal["config", "hidden", "qk"] = "config"
    kv_heads: Literal["config", "falcon"] = "config"  # falcon: 1 with multi_query, unless new_decoder_architecture
    # the class builds its attention without the cache config unless each of these flags is false (Falcon: rotary,
    # alibi), so the KV cache keeps the model's dtype whatever --kv-cache-dtype says
    kv_dtype_ignored_unless_false: tuple[StrictStr, ...] = ()
    # what `--kv-cache-dtype auto` resolves to on a GPU family (compute capability major), where the model's engine
    # hook decides (GLM-MoE-DSA: fp8_e4m3 on SM10x)
    kv_auto_by_cc_major: dict[int, Literal["fp8_e4m3", "bfloat16"]] = Field(default_factory=dict)
    # no attention layer at all (Mamba): vLLM's MambaModelConfig gives the state one block of max_model_len tokens
    attention_free: bool = False
    mamba: MambaKind | None = None
    # the temporal state's dtype: the model's; config: mamba_ssm_cache_dtype, float32 where absent (NemotronH);
    # config_or_model: mamba_ssm_cache_dtype, the model's where absent (Qwen3.5's mamba_ssm_dtype)
    mamba_ssm_dtype: Literal["model", "config", "config_or_model"] = "model"
    mamba_inner: Literal["heads", "expand"] = "heads"  # Mamba2's inner width: heads x head dim, or expand x hidden
    fields: dict[str, StrictStr] = Field(default_factory=dict)  # kselect's field name -> the config's
    defaults: dict[str, StrictInt] = Field(default_factory=dict)  # transformers' default where the config omits one
    wraps: Wraps | None = None  # a multimodal wrapper: its layers are its language model's (selector/config/hf_wrap.py)
    # vLLM's is_mm_prefix_lm while the wrapper serves images (model.multimodal=true): image tokens attend to each other
    # bidirectionally, the mm-prefix mask (model_arch_config_convertor.py; Gemma-3's wrapper sets it)
    mm_prefix: bool = False


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    release: StrictStr
    architectures: dict[str, Arch]
    # transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES for the rows a wrapper may name by its text config's model_type
    text_model_types: dict[str, StrictStr] = Field(default_factory=dict)
    # transformers' defaults of a wrapper's text config class (by model_type) for the fields its text_config omits
    text_defaults: dict[str, dict[str, StrictInt]] = Field(default_factory=dict)


# a checkout's conf/, or the wheel's kselect/conf (as compose.CONF_DIR; not imported: compose imports the schema)
TABLE_FILE = Path(__file__).resolve().parents[2] / "conf" / "architectures" / "vllm_0_34_0.yaml"


@lru_cache(maxsize=1)
def table() -> Table:
    return Table.model_validate(yaml.safe_load(TABLE_FILE.read_text()))
