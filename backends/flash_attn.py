"""FLASH_ATTN adapters: v3 (vLLM's FA3 build, or the upstream FA3 wheel) and v4 (flash-attn-4, or
vLLM's FA4 fork for head dim 512 and FP8 KV). The build is resolved and imported when the backend
is made, so a missing package fails at startup, not at the first forward."""

from __future__ import annotations

from backends.base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams
from backends.common import expand_descale, kernel_block_view, quant_inputs
from kernels import flash_attn as fa
from kernels import flash_attn_loader as loader
from kernels.reference import is_fp8


def _fp8_group(group) -> bool:
    return group.kv_cache_dtype.startswith("fp8")


class _FlashAttnBase(AttentionBackend):
    name = "FLASH_ATTN"

    def _prepare(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        if meta.mm_prefix is not None:
            raise NotImplementedError(f"{self.label}: mm_prefix spans are not wired to FlashAttention here; "
                                      "select TRITON_ATTN or TORCH_REFERENCE for bidirectional vision spans")
        if meta.q_positions is not None:
            raise NotImplementedError(f"{self.label}: explicit q_positions (MTP drafts) are not supported")
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta.block_table, self.group.kernel_block_size)
        return kc, vc, bt, quant_inputs(self.group.descale, q, k_cache, layer)

    def supports_cuda_graphs(self) -> bool:
        return True  # no host syncs in the call; FA3/FA4/fork capture was measured on the H200


class FlashAttn3Backend(_FlashAttnBase):
    label = "FLASH_ATTN v3"

    def __init__(self, group):
        super().__init__(group)
        try:
            self.kind, _ = loader.load_fa3()
        except ImportError as e:
            raise BackendUnavailableError(str(e).splitlines()[0]) from e

    def forward(self, q, k_cache, v_cache, meta, layer):
        kc, vc, bt, qi = self._prepare(q, k_cache, v_cache, meta, layer)
        if is_fp8(k_cache.dtype) and qi.q_descale is None:
            raise ValueError("FLASH_ATTN v3 with an FP8 KV cache needs quant-query (descale 'q_k_v'): "
                             "the FA3 build requires q, k and v in the same dtype")
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        return fa.fa3_forward(
            qi.q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, meta.max_seqlen_q, meta.max_seqlen_k,
            layer.softmax_scale, window_left=layer.window_left, sinks=layer.sinks,
            q_descale=expand_descale(qi.q_descale, b, hkv), k_descale=expand_descale(qi.k_descale, b, hkv),
            v_descale=expand_descale(qi.v_descale, b, hkv), out_dtype=q.dtype)


class FlashAttn4Backend(_FlashAttnBase):
    label = "FLASH_ATTN v4"

    def __init__(self, group):
        super().__init__(group)
        # Upstream FA4 on SM90 has no FP8 and no head dim 512: those go to vLLM's fork.
        self.fork = group.head_size > 256 or _fp8_group(group)
        if group.descale == "q_k_v":
            raise ValueError("FLASH_ATTN v4 on SM90 has no quant-query path: vLLM's FA4 fork dequantizes FP8 K/V "
                             "in the kernel and keeps q in bf16 (descale 'kv_dequant')")
        try:
            loader.load_fa4_fork() if self.fork else loader.load_fa4_upstream()
        except ImportError as e:
            raise BackendUnavailableError(str(e).splitlines()[0]) from e

    def forward(self, q, k_cache, v_cache, meta, layer):
        kc, vc, bt, qi = self._prepare(q, k_cache, v_cache, meta, layer)
        args = (kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, meta.max_seqlen_q, meta.max_seqlen_k,
                layer.softmax_scale)
        if not self.fork:
            return fa.fa4_forward(q, *args, window_left=layer.window_left, sinks=layer.sinks, out_dtype=q.dtype)
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        # the fork dequantizes K/V in the kernel: q stays in the model dtype (never quant-query)
        return fa.fa4_fork_forward(
            q, *args, window_left=layer.window_left, sinks=layer.sinks,
            k_descale=expand_descale(qi.k_descale, b, hkv), v_descale=expand_descale(qi.v_descale, b, hkv),
            out_dtype=q.dtype)

