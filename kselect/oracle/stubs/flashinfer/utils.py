"""flashinfer.utils stand-in. vLLM sizes a device counter buffer for TRT-LLM-gen's multi-CTA
KV path from this at metadata-builder init; with no device it is an empty CPU tensor."""

from flashinfer import _placeholder


def get_trtllm_gen_multi_ctas_kv_counter_bytes(*args, **kwargs) -> int:
    return 0


__getattr__ = _placeholder
