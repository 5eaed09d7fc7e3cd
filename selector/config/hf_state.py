"""A Mamba-like layer's state per sequence, as vLLM 0.34.0's MambaStateShapeCalculator shapes it
(vllm/model_executor/layers/mamba/mamba_utils.py; tensor parallel 1, no speculative tokens): (shape, dtype) pairs,
dtype `model` (the model's dtype) or a torch dtype name. Only the bytes matter to kselect: vLLM pads the attention
block until one attention page covers them (platforms/interface.py _align_hybrid_block_size)."""

from __future__ import annotations

from ..config.hf_fields import TextFields, need
from ..config.hf_table import Arch

SSM_DTYPES = ("float32", "bfloat16", "float16")


def _need(f: TextFields, w: str, row: Arch, key: str) -> int:
    return need(f, w, key, row.fields)


def _ssm_dtype(f: TextFields, w: str, row: Arch) -> str:
    """The temporal state's dtype: the model's, or the config's (vLLM's NemotronHForCausalLMConfig and
    Qwen3_5ForConditionalGenerationConfig in models/config.py), float32 or the model's when absent."""
    if row.mamba_ssm_dtype == "model" or (row.mamba_ssm_dtype == "config_or_model" and not f.mamba_ssm_cache_dtype):
        return "model"
    v = f.mamba_ssm_cache_dtype or "float32"
    if v not in SSM_DTYPES:
        raise ValueError(f"{w}.mamba_ssm_cache_dtype: got {v!r}; allowed: {', '.join(SSM_DTYPES)}")
    return v


def _inner(f: TextFields, w: str, row: Arch) -> int:
    """The mixer's inner width: intermediate_size_mamba where the row names one, else mamba_expand x hidden_size."""
    if f.intermediate_size_mamba is not None:
        return f.intermediate_size_mamba
    return _need(f, w, row, "mamba_expand") * _need(f, w, row, "hidden_size")


def mamba1(f: TextFields, w: str, row: Arch) -> tuple:
    # vLLM's mamba.py reads the config's intermediate size itself; only Jamba's row falls back to expand x hidden
    only_named = "intermediate_size_mamba" in row.fields and "mamba_expand" not in {**row.fields, **row.defaults}
    inner = _need(f, w, row, "intermediate_size_mamba") if only_named else _inner(f, w, row)
    return (((_need(f, w, row, "conv_kernel") - 1, inner), "model"),
            ((inner, _need(f, w, row, "ssm_state_size")), _ssm_dtype(f, w, row)))


def mamba2(f: TextFields, w: str, row: Arch) -> tuple:
    n_heads, hdim = _need(f, w, row, "mamba_num_heads"), _need(f, w, row, "mamba_head_dim")
    groups, state = _need(f, w, row, "n_groups"), _need(f, w, row, "ssm_state_size")
    inner = n_heads * hdim if row.mamba_inner == "heads" else _inner(f, w, row)
    conv_dim = inner + 2 * groups * state
    return (((_need(f, w, row, "conv_kernel") - 1, conv_dim), "model"), ((n_heads, hdim, state), _ssm_dtype(f, w, row)))


def gdn(f: TextFields, w: str, row: Arch) -> tuple:
    kh, vh = _need(f, w, row, "linear_num_key_heads"), _need(f, w, row, "linear_num_value_heads")
    kd, vd = _need(f, w, row, "linear_key_head_dim"), _need(f, w, row, "linear_value_head_dim")
    conv = _need(f, w, row, "conv_kernel")
    return (((conv - 1, kd * kh * 2 + vd * vh), "model"), ((vh, vd, kd), _ssm_dtype(f, w, row)))


def short_conv(f: TextFields, w: str, row: Arch) -> tuple:
    """short_conv_state_shape: (kernel - 1, the conv's width: intermediate_size_mamba where named, else hidden)."""
    width = f.intermediate_size_mamba or _need(f, w, row, "hidden_size")
    return (((_need(f, w, row, "conv_kernel") - 1, width), "model"),)


STATES = {"mamba1": mamba1, "mamba2": mamba2, "gdn": gdn, "short_conv": short_conv}


def mamba_state(f: TextFields, w: str, row: Arch) -> tuple:
    if row.mamba is None:
        raise ValueError(f"{w}: the layer pattern has state (mamba) layers, which {row.file} does not build")
    return STATES[row.mamba](f, w, row)
