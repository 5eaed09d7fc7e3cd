"""A Hugging Face config.json -> the layers vLLM gives a cache, the way vLLM 0.34.0's model classes build them
(vllm/model_executor/models/<family>.py). The architectures kselect models are the table `ARCHITECTURES`;
anything else is refused by name. Only JSON values are read: no code from a config ever runs.

Each family reads the fields its vLLM model class reads; a missing or wrong-typed field is a ValueError naming
`model.hf_config.<field>` (exit 2 at the edges)."""

from __future__ import annotations

from collections.abc import Callable

from ..config.layers import LayerSpec
from ..config.vocab import FIXED_KINDS

MAX_LAYERS, MAX_DIM = 512, 1 << 20


def _get(c: dict, key: str, default=..., *, lo: int = 1, hi: int = MAX_DIM, where: str = "model.hf_config"):
    """An integer field of the config, bounded; `default` when absent (no default: required)."""
    v = c.get(key, default)
    if v is ...:
        raise ValueError(f"{where}.{key} is missing; allowed: an integer {lo}..{hi} (the architecture needs it)")
    if v is None and default is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{where}.{key}: got {v!r}; allowed: an integer {lo}..{hi}")
    return v


def text_config(c: dict) -> tuple[dict, str]:
    """The text decoder's config (multimodal wrappers nest it) and its key path."""
    t = c.get("text_config")
    if t is None:
        return c, "model.hf_config"
    if not isinstance(t, dict):
        raise ValueError(f"model.hf_config.text_config: got {type(t).__name__}; allowed: an object")
    return t, "model.hf_config.text_config"


def _heads(t: dict, w: str) -> tuple[int, int, int]:
    heads = _get(t, "num_attention_heads", where=w, hi=4096)
    kv = _get(t, "num_key_value_heads", None, where=w, hi=4096) or heads
    if heads % kv:
        raise ValueError(f"{w}.num_attention_heads={heads} is not a multiple of {w}.num_key_value_heads={kv}")
    head = _get(t, "head_dim", None, where=w, hi=4096)
    if head is None:
        hidden = _get(t, "hidden_size", where=w)
        if hidden % heads:
            raise ValueError(f"{w}.hidden_size={hidden} is not a multiple of {w}.num_attention_heads={heads} "
                             f"(no head_dim given)")
        head = hidden // heads
    return heads, kv, head


def _n_layers(t: dict, w: str) -> int:
    return _get(t, "num_hidden_layers", where=w, hi=MAX_LAYERS)


def _layer_types(t: dict, w: str, n: int, allowed: tuple[str, ...]) -> list[str] | None:
    lt = t.get("layer_types")
    if lt is None:
        return None
    if not isinstance(lt, list) or len(lt) != n or any(x not in allowed for x in lt):
        raise ValueError(f"{w}.layer_types: want {n} entries (num_hidden_layers), each one of {list(allowed)}; "
                         f"got {str(lt)[:120]}")
    return lt


def _window(t: dict, w: str) -> int | None:
    return _get(t, "sliding_window", None, where=w, hi=1 << 24)


# ---------------------------------------------------------------- families


def dense(t: dict, w: str) -> list[LayerSpec]:
    """Llama, Qwen3, Mistral (llama.py / qwen3.py): `layer_types` marks sliding layers; without it a config
    sliding window applies to every layer (vLLM's cache_config.sliding_window) unless use_sliding_window is off."""
    n, (_, kv, head) = _n_layers(t, w), _heads(t, w)
    window = _window(t, w)
    types = _layer_types(t, w, n, ("full_attention", "sliding_attention"))
    if types is None:
        on = window is not None and t.get("use_sliding_window", True) is not False
        types = ["sliding_attention" if on else "full_attention"] * n
    if "sliding_attention" in types and window is None:
        raise ValueError(f"{w}.sliding_window is missing but layer_types has sliding_attention layers")
    return [LayerSpec(i, "sliding_window" if x == "sliding_attention" else "full_attention", head, kv,
                      window if x == "sliding_attention" else None) for i, x in enumerate(types)]


def gemma3(t: dict, w: str) -> list[LayerSpec]:
    """gemma3.py: layer_types (transformers fills it from sliding_window_pattern: every 6th layer full)."""
    n = _n_layers(t, w)
    if t.get("layer_types") is None:
        every = _get(t, "sliding_window_pattern", 6, where=w, hi=MAX_LAYERS)
        t = dict(t, layer_types=["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)])
    return dense(t, w)


def gpt_oss(t: dict, w: str) -> list[LayerSpec]:
    """gpt_oss.py: even layers slide (`layer_idx % 2 == 0`, not layer_types); every layer has sinks."""
    n, (_, kv, head) = _n_layers(t, w), _heads(t, w)
    window = _get(t, "sliding_window", where=w, hi=1 << 24)
    return [LayerSpec(i, "sliding_window" if i % 2 == 0 else "full_attention", head, kv,
                      window if i % 2 == 0 else None, sinks=True) for i in range(n)]


def mla(t: dict, w: str) -> list[LayerSpec]:
    """deepseek_v2.py (DeepSeek-V3, Kimi K2): every layer MLA, one latent head of kv_lora_rank + qk_rope_head_dim;
    `index_topk` (DeepSeek-V3.2) makes it sparse."""
    n = _n_layers(t, w)
    _get(t, "num_attention_heads", where=w, hi=4096)  # the MLA priority lists read the query heads
    head = _get(t, "kv_lora_rank", where=w, hi=8192) + _get(t, "qk_rope_head_dim", where=w, hi=4096)
    sparse = t.get("index_topk") is not None
    out = [LayerSpec(i, "mla", head, 1, sparse=sparse) for i in range(n)]
    if sparse:  # each layer's indexer keeps its keys in a cache of its own (DeepseekV32IndexerCache)
        _get(t, "index_topk", where=w, hi=1 << 20)
        idx = _get(t, "index_head_dim", where=w, hi=4096)
        out += [LayerSpec(i, "mla_indexer", idx, 1, mamba_type="deepseek_v32_indexer") for i in range(n)]
    return out


def mamba2_state(t: dict, w: str) -> tuple:
    """MambaStateShapeCalculator.mamba2_state_shape (tp 1, no speculative tokens)."""
    heads, hdim = _get(t, "mamba_num_heads", where=w), _get(t, "mamba_head_dim", where=w)
    groups, state, conv = _get(t, "n_groups", where=w), _get(t, "ssm_state_size", where=w), _get(t, "conv_kernel", where=w)
    conv_dim = heads * hdim + 2 * groups * state
    # NemotronH's temporal state is float32 unless its config says otherwise (vLLM's
    # NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype, models/config.py)
    ssm = t.get("mamba_ssm_cache_dtype") or "float32"
    if ssm not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"{w}.mamba_ssm_cache_dtype: got {ssm!r}; allowed: float32, bfloat16, float16")
    return (((conv - 1, conv_dim), "model"), ((heads, hdim, state), ssm))


def nemotron_h(t: dict, w: str) -> list[LayerSpec]:
    """nemotron_h.py: hybrid_override_pattern, one letter a layer: M mamba2, * attention, - MLP, E MoE."""
    pat = t.get("hybrid_override_pattern")
    if not isinstance(pat, str) or not pat or len(pat) > MAX_LAYERS or set(pat) - set("M*-E"):
        raise ValueError(f"{w}.hybrid_override_pattern: got {str(pat)[:80]!r}; allowed: a string of M, *, -, E")
    _, kv, head = _heads(t, w)
    state = mamba2_state(t, w)
    out = []
    for i, ch in enumerate(pat):
        if ch == "*":
            out.append(LayerSpec(i, "full_attention", head, kv))
        elif ch == "M":
            out.append(LayerSpec(i, "mamba", 0, 0, mamba_type="mamba2", mamba_state=state))
    return out


def jamba(t: dict, w: str) -> list[LayerSpec]:
    """jamba.py: layers_block_type (transformers: attention where i % attn_layer_period == attn_layer_offset,
    else mamba1); mamba1_state_shape with intermediate = mamba_expand * hidden_size."""
    n, (_, kv, head) = _n_layers(t, w), _heads(t, w)
    period, offset = _get(t, "attn_layer_period", 8, where=w, hi=MAX_LAYERS), _get(t, "attn_layer_offset", 4, lo=0, where=w, hi=MAX_LAYERS)
    inner = _get(t, "mamba_expand", 2, where=w, hi=64) * _get(t, "hidden_size", where=w)
    state = (((_get(t, "mamba_d_conv", 4, where=w, hi=64) - 1, inner), "model"),
             ((inner, _get(t, "mamba_d_state", 16, where=w, hi=4096)), "model"))
    return [LayerSpec(i, "full_attention", head, kv) if i % period == offset
            else LayerSpec(i, "mamba", 0, 0, mamba_type="mamba1", mamba_state=state) for i in range(n)]


def qwen3_next(t: dict, w: str) -> list[LayerSpec]:
    """qwen3_next.py: layer_types (transformers: every full_attention_interval-th layer full, the rest
    linear_attention = gated delta net); gated_delta_net_state_shape. The GDN layer's mamba_type is
    MambaAttentionBackendEnum.GDN_ATTN (layers/mamba/gdn/base.py), recorded by the oracle as `gdn`."""
    n, (_, kv, head) = _n_layers(t, w), _heads(t, w)
    types = _layer_types(t, w, n, ("full_attention", "linear_attention"))
    if types is None:
        every = _get(t, "full_attention_interval", 4, where=w, hi=MAX_LAYERS)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    kh, vh = _get(t, "linear_num_key_heads", where=w), _get(t, "linear_num_value_heads", where=w)
    kd, vd = _get(t, "linear_key_head_dim", where=w), _get(t, "linear_value_head_dim", where=w)
    conv = _get(t, "linear_conv_kernel_dim", where=w, hi=64)
    state = (((conv - 1, kd * kh * 2 + vd * vh), "model"), ((vh, vd, kd), "model"))
    return [LayerSpec(i, "full_attention", head, kv) if x == "full_attention"
            else LayerSpec(i, "mamba", 0, 0, mamba_type="gdn", mamba_state=state) for i, x in enumerate(types)]


def llama4(t: dict, w: str) -> list[LayerSpec]:
    """llama4.py: a layer with RoPE (no_rope_layers[i] != 0) is chunked local when attention_chunk_size is set;
    NoPE layers are full (transformers' default no_rope_layers: every no_rope_layer_interval-th layer NoPE)."""
    n, (_, kv, head) = _n_layers(t, w), _heads(t, w)
    rope = t.get("no_rope_layers")
    if not rope:  # null or [] (as published for Scout): transformers' Llama4TextConfig fills the default
        every = _get(t, "no_rope_layer_interval", 4, where=w, hi=MAX_LAYERS)
        rope = [int((i + 1) % every != 0) for i in range(n)]
    if not isinstance(rope, list) or len(rope) != n or any(x not in (0, 1) for x in rope):
        raise ValueError(f"{w}.no_rope_layers: want {n} entries of 0/1; got {str(rope)[:120]}")
    chunk = _get(t, "attention_chunk_size", None, where=w, hi=1 << 24)
    return [LayerSpec(i, "chunked_local", head, kv, chunk) if r and chunk else LayerSpec(i, "full_attention", head, kv)
            for i, r in enumerate(rope)]


# architecture (config.json `architectures[0]`) -> (family, how its layers are built)
ARCHITECTURES: dict[str, tuple[str, Callable]] = {
    "LlamaForCausalLM": ("dense", dense),
    "MistralForCausalLM": ("dense", dense),
    "Qwen2ForCausalLM": ("dense", dense),
    "Qwen3ForCausalLM": ("dense", dense),
    "Qwen3MoeForCausalLM": ("dense", dense),
    "Gemma3ForCausalLM": ("sliding", gemma3),
    "GptOssForCausalLM": ("sliding", gpt_oss),
    "DeepseekV3ForCausalLM": ("mla", mla),
    "DeepseekV32ForCausalLM": ("mla", mla),
    "KimiK2ForCausalLM": ("mla", mla),
    "Qwen3NextForCausalLM": ("hybrid_mamba", qwen3_next),
    "NemotronHForCausalLM": ("hybrid_mamba", nemotron_h),
    "JambaForCausalLM": ("hybrid_mamba", jamba),
    "Llama4ForConditionalGeneration": ("chunked_local", llama4),
    "Llama4ForCausalLM": ("chunked_local", llama4),
}


def architecture(c: dict) -> str:
    archs = c.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ValueError(f"model.hf_config.architectures: got {str(archs)[:80]}; allowed: a list naming one of "
                         f"{sorted(ARCHITECTURES)}")
    if archs[0] not in ARCHITECTURES:
        raise ValueError(f"model.hf_config.architectures: {archs[0]!r} is not an architecture kselect models; allowed: "
                         f"{', '.join(sorted(ARCHITECTURES))}")
    return archs[0]


def derive_layers(c: dict) -> tuple[str, str, tuple[LayerSpec, ...]]:
    """(architecture, family, layers) of a config.json object."""
    arch = architecture(c)
    family, build = ARCHITECTURES[arch]
    t, w = text_config(c)
    layers = tuple(build(t, w))
    if all(x.kind in FIXED_KINDS for x in layers):
        raise ValueError(f"{w}: no attention layer (num_hidden_layers / the layer pattern); kselect selects attention")
    return arch, family, layers


def model_head_size(c: dict, layers: tuple[LayerSpec, ...]) -> int:
    """vLLM's ModelConfig.get_head_size: the MLA latent width, else head_dim (or hidden / heads)."""
    att = [x for x in layers if x.kind not in FIXED_KINDS]
    if att[0].kind == "mla":
        return att[0].head_size
    t, w = text_config(c)
    return _heads(t, w)[2]
