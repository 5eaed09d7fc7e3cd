"""Gemma-4's arguments in Hugging Face's config.json form and back: the text decoder (gemma4_text, or gemma4 with a
text_config) and the MTP assistant (gemma4_assistant). config.py's Gemma4Args and DrafterArgs build from these
fields and call these for their config.json."""

from __future__ import annotations

from typing import Any

from .config_base import FULL, MODEL_DTYPES, SLIDING, DrafterError, derive_layer_types


def text_args(d: dict[str, Any]) -> dict[str, Any]:
    """Gemma4Args' fields from a Hugging Face config.json dict (gemma4_text, or gemma4 with a text_config)."""
    if "text_config" in d and d.get("model_type") != "gemma4_text":
        dtype = d.get("dtype") or d.get("torch_dtype")
        d = dict(d["text_config"])
        d.setdefault("dtype", dtype)
    mt = d.get("model_type", "gemma4_text")
    if mt not in ("gemma4_text", "gemma4"):
        raise ValueError(f"config.json model_type {mt!r} is not a Gemma-4 text model")
    n = d["num_hidden_layers"]
    layer_types = d.get("layer_types") or derive_layer_types(n, 6)
    rope = d.get("rope_parameters") or {}
    rs, rf = rope.get(SLIDING, {}) or {}, rope.get(FULL, {}) or {}
    _check_rope(rs, rf)
    global_head_dim, num_global_kv = _full_layer_shapes(d, layer_types)
    if d.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention is not supported by this text decoder")
    if d.get("attention_bias"):
        raise ValueError("attention_bias=True is not supported (Gemma-4 has no attention biases)")
    act = d.get("hidden_activation", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"unsupported hidden_activation {act!r}")
    eos = d.get("eos_token_id", 1)
    if isinstance(eos, list):
        eos = eos[0]
    dtype = str(d.get("dtype") or d.get("torch_dtype") or "bfloat16").removeprefix("torch.")
    return dict(
        vocab_size=d["vocab_size"],
        hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"],
        num_hidden_layers=n,
        num_attention_heads=d["num_attention_heads"],
        num_key_value_heads=d["num_key_value_heads"],
        num_global_key_value_heads=num_global_kv,
        head_dim=d.get("head_dim", 256),
        global_head_dim=global_head_dim,
        sliding_window=d.get("sliding_window", 512),
        layer_types=list(layer_types),
        final_logit_softcapping=d.get("final_logit_softcapping"),
        rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        max_position_embeddings=d.get("max_position_embeddings", 131072),
        rope_theta_sliding=rs.get("rope_theta", 10_000.0),
        rope_theta_full=rf.get("rope_theta", 1_000_000.0),
        partial_rotary_factor_full=rf.get("partial_rotary_factor", 0.25) if rf else 0.25,
        hidden_size_per_layer_input=d.get("hidden_size_per_layer_input", 256) or 0,
        vocab_size_per_layer_input=d.get("vocab_size_per_layer_input", 262144) or 0,
        num_kv_shared_layers=d.get("num_kv_shared_layers", 0) or 0,
        use_double_wide_mlp=bool(d.get("use_double_wide_mlp", False)),
        attention_k_eq_v=bool(d.get("attention_k_eq_v", False)),
        enable_moe_block=bool(d.get("enable_moe_block", False)),
        num_experts=d.get("num_experts"),
        top_k_experts=d.get("top_k_experts"),
        moe_intermediate_size=d.get("moe_intermediate_size"),
        dtype=dtype if dtype in MODEL_DTYPES else "bfloat16",
        pad_token_id=d.get("pad_token_id", 0) if d.get("pad_token_id") is not None else 0,
        eos_token_id=eos if eos is not None else 1,
        bos_token_id=d.get("bos_token_id", 2) if d.get("bos_token_id") is not None else 2,
        name=d.get("_name_or_path") or "gemma4",
    )


def _check_rope(sliding: dict, full: dict) -> None:
    for rp, kind in ((sliding, "default"), (full, "proportional")):
        if rp and rp.get("rope_type", kind) != kind:
            raise ValueError(f"unsupported rope_type {rp.get('rope_type')!r} (expected {kind!r})")
        if rp and rp.get("factor", 1.0) != 1.0:
            raise ValueError("RoPE scaling factor != 1 is not supported")


def _full_layer_shapes(d: dict[str, Any], layer_types: list[str]) -> tuple[int, int | None]:
    """(head dim, KV heads) of the full layers: the config's, or the first full layer's per_layer_config."""
    global_head_dim = d.get("global_head_dim", 512)
    num_global_kv = d.get("num_global_key_value_heads")
    for idx, over in (d.get("per_layer_config") or {}).items():
        if layer_types[int(idx)] == FULL:
            global_head_dim = over.get("head_dim", global_head_dim)
            if "num_key_value_heads" in over:
                num_global_kv = over["num_key_value_heads"]
            break
    return global_head_dim, num_global_kv


def text_config(a) -> dict[str, Any]:
    """Kwargs for `transformers.Gemma4TextConfig` (and our config.json) of a Gemma4Args."""
    d: dict[str, Any] = dict(
        vocab_size=a.vocab_size,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.num_hidden_layers,
        num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_key_value_heads,
        head_dim=a.head_dim,
        global_head_dim=a.global_head_dim,
        layer_types=list(a.layer_types),
        sliding_window=a.sliding_window,
        final_logit_softcapping=a.final_logit_softcapping,
        rms_norm_eps=a.rms_norm_eps,
        max_position_embeddings=a.max_position_embeddings,
        rope_parameters={
            SLIDING: {"rope_type": "default", "rope_theta": a.rope_theta_sliding},
            FULL: {
                "rope_type": "proportional",
                "partial_rotary_factor": a.partial_rotary_factor_full,
                "rope_theta": a.rope_theta_full,
            },
        },
        hidden_size_per_layer_input=a.hidden_size_per_layer_input,
        vocab_size_per_layer_input=a.vocab_size_per_layer_input,
        num_kv_shared_layers=a.num_kv_shared_layers,
        use_double_wide_mlp=a.use_double_wide_mlp,
        attention_k_eq_v=a.attention_k_eq_v,
        enable_moe_block=a.enable_moe_block,
        num_experts=a.num_experts,
        top_k_experts=a.top_k_experts,
        moe_intermediate_size=a.moe_intermediate_size,
        pad_token_id=a.pad_token_id,
        eos_token_id=a.eos_token_id,
        bos_token_id=a.bos_token_id,
        tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh",
        dtype=a.dtype,
    )
    if a.num_global_key_value_heads is not None:
        d["num_global_key_value_heads"] = a.num_global_key_value_heads
    return d


def assistant_args(d: dict[str, Any]) -> dict[str, Any]:
    """DrafterArgs' fields from an assistant `config.json` (model_type gemma4_assistant)."""
    mt = d.get("model_type")
    if mt != "gemma4_assistant":
        raise DrafterError(f"config.json model_type {mt!r} is not 'gemma4_assistant' (a Gemma-4 MTP drafter)")
    tc = d.get("text_config")
    if not isinstance(tc, dict):
        raise DrafterError("gemma4_assistant config.json has no text_config")
    for key in ("hidden_size_per_layer_input", "vocab_size_per_layer_input"):
        if tc.get(key):
            raise DrafterError(f"drafter text_config.{key}={tc[key]}: the assistant has no per-layer embeddings")
    if tc.get("enable_moe_block"):
        raise DrafterError("drafter text_config.enable_moe_block=true: the assistant has no MoE block")
    n = tc["num_hidden_layers"]
    shared = tc.get("num_kv_shared_layers") or n
    if shared != n:
        raise DrafterError(f"drafter: num_kv_shared_layers={shared} != num_hidden_layers={n} "
                           "(every assistant layer reads the target's KV)")
    global_head_dim = tc.get("global_head_dim", 512)
    num_global_kv = tc.get("num_global_key_value_heads")
    layer_types = tc.get("layer_types") or [SLIDING] * (n - 1) + [FULL]
    for idx, over in (tc.get("per_layer_config") or {}).items():
        if layer_types[int(idx)] == FULL:
            global_head_dim = over.get("head_dim", global_head_dim)
            num_global_kv = over.get("num_key_value_heads", num_global_kv)
            break
    rope = tc.get("rope_parameters") or {}
    rs, rf = rope.get(SLIDING) or {}, rope.get(FULL) or {}
    k_eq_v = bool(tc.get("attention_k_eq_v", False))
    kv = tc.get("num_key_value_heads", 1)
    dtype = str(d.get("dtype") or d.get("torch_dtype") or tc.get("dtype") or "bfloat16").removeprefix("torch.")
    return dict(
        hidden_size=tc["hidden_size"], intermediate_size=tc["intermediate_size"], num_hidden_layers=n,
        num_attention_heads=tc["num_attention_heads"], layer_types=list(layer_types),
        backbone_hidden_size=d.get("backbone_hidden_size", 1536), vocab_size=tc["vocab_size"],
        head_dim=tc.get("head_dim", 256), global_head_dim=global_head_dim, num_key_value_heads=kv,
        num_global_key_value_heads=(num_global_kv if (k_eq_v and num_global_kv) else kv),
        sliding_window=tc.get("sliding_window", 512), rms_norm_eps=tc.get("rms_norm_eps", 1e-6),
        rope_theta_sliding=rs.get("rope_theta", 10_000.0), rope_theta_full=rf.get("rope_theta", 1_000_000.0),
        partial_rotary_factor_full=rf.get("partial_rotary_factor", 0.25) if rf else 0.25,
        use_ordered_embeddings=bool(d.get("use_ordered_embeddings", False)),
        num_centroids=d.get("num_centroids", 2048), centroid_intermediate_top_k=d.get("centroid_intermediate_top_k", 32),
        attention_k_eq_v=k_eq_v, dtype=dtype if dtype in ("float32", "bfloat16", "float16") else "bfloat16")


def assistant_config(a) -> dict[str, Any]:
    """An assistant config.json (model_type gemma4_assistant) of a DrafterArgs."""
    text = dict(
        model_type="gemma4_text", vocab_size=a.vocab_size, hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size, num_hidden_layers=a.num_hidden_layers,
        num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
        head_dim=a.head_dim, global_head_dim=a.global_head_dim, layer_types=list(a.layer_types),
        sliding_window=a.sliding_window, rms_norm_eps=a.rms_norm_eps, final_logit_softcapping=None,
        rope_parameters={
            SLIDING: {"rope_type": "default", "rope_theta": a.rope_theta_sliding},
            FULL: {"rope_type": "proportional", "partial_rotary_factor": a.partial_rotary_factor_full,
                   "rope_theta": a.rope_theta_full}},
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
        num_kv_shared_layers=a.num_hidden_layers, attention_k_eq_v=a.attention_k_eq_v,
        enable_moe_block=False, use_double_wide_mlp=False, hidden_activation="gelu_pytorch_tanh")
    if a.attention_k_eq_v:
        text["num_global_key_value_heads"] = a.num_global_key_value_heads
    return dict(
        model_type="gemma4_assistant", architectures=["Gemma4AssistantForCausalLM"], dtype=a.dtype,
        text_config=text, backbone_hidden_size=a.backbone_hidden_size,
        use_ordered_embeddings=a.use_ordered_embeddings, num_centroids=a.num_centroids,
        centroid_intermediate_top_k=a.centroid_intermediate_top_k, tie_word_embeddings=True)
