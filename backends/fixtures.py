"""Build a GroupSelection / AttentionMetadata by hand (tests, conformance, benchmarks)."""

from __future__ import annotations

from .base import AttentionMetadata, LayerParams
from ..selector.outputs.selection import GroupSelection
from ..selector.config.vocab import is_fp8


def make_group(backend="TORCH_REFERENCE", version=None, head=64, kv="float32", kernel_block=16, kv_block=16,
               descale="none", num_kv_heads=2, window=None, build=None) -> GroupSelection:
    fp8 = is_fp8(kv)
    return GroupSelection(
        kind="sliding_window" if window else "full_attention", layers=(0,), head_size=head,
        num_kv_heads=num_kv_heads, sliding_window=window, backend=backend, flash_attn_version=version, build=build,
        kernel_block_size=kernel_block, kv_block_size=kv_block, kv_cache_dtype=kv,
        quant_query=descale == "q_k_v", descale=descale, kv_scales="calibrated" if fp8 else "none", mm_prefix=False)


def meta_of(case) -> AttentionMetadata:
    return AttentionMetadata(case.cu_seqlens_q, case.seqused_k, case.block_table, case.max_seqlen_q,
                             case.max_seqlen_k, mm_prefix=case.mm_prefix, q_positions=case.q_positions)


def layer_of(case, q_scale=None) -> LayerParams:
    return LayerParams(case.softmax_scale, window_left=case.window_left, sinks=case.sinks,
                       k_scale=case.k_descale, v_scale=case.v_descale, q_scale=q_scale)
