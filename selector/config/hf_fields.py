"""The config.json fields kselect reads to derive a model's layers, as a strict pydantic model: an integer is a JSON
integer (never a bool, a float or a string), a list is a list. A field absent from this model is ignored, as vLLM
ignores it; a wrong value is a ValueError naming `model.hf_config.<field>` (exit 2 at the edges). Reading the file
is hf_model.py's; which fields an architecture needs is hf_arch.py's."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

MAX_LAYERS, MAX_DIM, MAX_TOKENS = 512, 1 << 20, 1 << 24

Layers = Annotated[StrictInt, Field(ge=1, le=MAX_LAYERS)]
Dim = Annotated[StrictInt, Field(ge=1, le=MAX_DIM)]
Heads = Annotated[StrictInt, Field(ge=1, le=4096)]
Tokens = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]
Small = Annotated[StrictInt, Field(ge=1, le=64)]
Index = Annotated[StrictInt, Field(ge=0, le=MAX_LAYERS)]


class TextFields(BaseModel):
    """The decoder's fields (the top level, or `text_config` of a multimodal wrapper). Renamed fields of an
    architecture (conf/architectures/vllm_0_34_0.yaml `fields:`) are read under kselect's names."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    num_hidden_layers: Layers | None = None
    num_attention_heads: Heads | None = None
    num_key_value_heads: Heads | None = None
    head_dim: Annotated[StrictInt, Field(ge=1, le=4096)] | None = None
    hidden_size: Dim | None = None
    sliding_window: Annotated[StrictInt, Field(ge=0, le=MAX_TOKENS)] | None = None
    use_sliding_window: StrictBool | None = None
    max_window_layers: Index | None = None
    layer_types: list[StrictStr] | None = None
    sliding_window_pattern: Layers | None = None
    attention_chunk_size: Tokens | None = None
    no_rope_layers: list[StrictInt] | None = None
    no_rope_layer_interval: Layers | None = None
    multi_query: StrictBool | None = None  # falcon.py: one KV head unless new_decoder_architecture
    new_decoder_architecture: StrictBool | None = None
    rotary: StrictBool | None = None  # falcon.py: RoPE or ALiBi layers are built without the cache config
    alibi: StrictBool | None = None
    attn_logit_softcapping: Annotated[StrictFloat | StrictInt, Field(ge=0)] | None = None  # fa_utils.py: FA4 head 256 falls back
    # attention-sink switches (granite.py, laguna.py, mimo_v2.py)
    attention_sinks: StrictBool | None = None
    swa_attention_sink_enabled: StrictBool | None = None
    add_swa_attention_sink_bias: StrictBool | None = None
    # MLA (deepseek_v2.py)
    kv_lora_rank: Annotated[StrictInt, Field(ge=1, le=8192)] | None = None
    qk_rope_head_dim: Annotated[StrictInt, Field(ge=0, le=4096)] | None = None
    qk_nope_head_dim: Annotated[StrictInt, Field(ge=0, le=4096)] | None = None
    index_topk: Annotated[StrictInt, Field(ge=1, le=MAX_DIM)] | None = None
    index_head_dim: Heads | None = None
    # hybrid layer patterns
    hybrid_override_pattern: Annotated[StrictStr, Field(min_length=1, max_length=MAX_LAYERS)] | None = None
    layers_block_type: list[StrictStr] | None = None
    attn_layer_indices: list[Index] | None = None
    attn_layer_period: Layers | None = None
    attn_layer_offset: Index | None = None
    full_attention_interval: Layers | None = None
    # Mamba-like states (MambaStateShapeCalculator)
    mamba_num_heads: Dim | None = None
    mamba_head_dim: Dim | None = None
    n_groups: Dim | None = None
    ssm_state_size: Dim | None = None
    conv_kernel: Small | None = None
    mamba_expand: Small | None = None
    mamba_ssm_cache_dtype: StrictStr | None = None
    intermediate_size_mamba: Dim | None = None
    linear_num_key_heads: Dim | None = None
    linear_num_value_heads: Dim | None = None
    linear_key_head_dim: Dim | None = None
    linear_value_head_dim: Dim | None = None
    conv_l_cache: Small | None = None


FIELDS = tuple(TextFields.model_fields)


def need(f: TextFields, w: str, key: str, renames: dict[str, str] | None = None) -> int:
    """A field the architecture needs (named as the config names it, where the architecture renames it)."""
    v = getattr(f, key)
    if v is None:
        raise ValueError(f"{w}.{(renames or {}).get(key, key)} is missing; allowed: an integer (the architecture needs it)")
    return v


def read_fields(t: dict, where: str, renames: dict[str, str] | None = None) -> TextFields:
    """The fields of a text config (with an architecture's renames: kselect name -> the config's name)."""
    data: dict[str, Any] = {k: t[k] for k in FIELDS if k in t}
    for mine, theirs in (renames or {}).items():
        data.pop(mine, None)
        v: Any = t
        for part in theirs.split("."):  # a nested field: `attn_config.kv_n_heads` (Dbrx)
            v = v.get(part, None) if isinstance(v, dict) else None
        if v is not None:
            data[mine] = v
    try:
        return TextFields.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        name = (renames or {}).get(key, key)
        raise ValueError(f"{where}.{name}: got {str(err.get('input'))[:80]!r}; allowed: {_allowed(key, err)}") from None


def _allowed(key: str, err: dict) -> str:
    ctx = err.get("ctx") or {}
    ann = TextFields.model_fields[key].annotation
    if "float" in str(ann):
        return "a number >= 0"
    if "ge" in ctx or "le" in ctx or "int" in str(ann):
        lo, hi = _bounds(key)
        return f"an integer {lo}..{hi}" if "list" not in str(ann) else f"a list of integers {lo}..{hi}"
    if "bool" in str(ann):
        return "true or false"
    if "list" in str(ann):
        return "a list of strings"
    return "a string"


def _bounds(key: str) -> tuple[int, int]:
    """The field's integer bounds (annotated_types Ge/Le inside its Annotated alias)."""
    lo, hi = 0, MAX_DIM
    ann = TextFields.model_fields[key].annotation
    for arg in (*getattr(ann, "__args__", ()), ann):
        for m in getattr(arg, "__metadata__", ()):
            for c in (*getattr(m, "metadata", ()), m):
                lo, hi = getattr(c, "ge", lo), getattr(c, "le", hi)
    return lo, hi
