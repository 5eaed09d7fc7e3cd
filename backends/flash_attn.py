"""FLASH_ATTN adapters: v3 (vLLM's FA3 build or flash-attention's hopper build) and v4 (flash-attn-4, or vLLM's FA4 fork for head dim
512 and FP8 KV). The build is resolved and imported when the backend is made, so a missing package
fails at startup, not at the first forward. Bidirectional mm-prefix spans run as a second,
non-causal pass over the span rows (backends/span_split.py)."""

from __future__ import annotations

import torch

from .base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams
from .common import expand_descale, kernel_block_view, quant_inputs
from .span_split import select_descale, span_pass
from ..kernels import flash_attn as fa
from ..kernels import flash_attn_loader as loader
from ..selector.config.vocab import is_fp8


def _fp8_group(group) -> bool:
    return is_fp8(group.kv_cache_dtype)


class _FlashAttnBase(AttentionBackend):
    name = "FLASH_ATTN"
    label = "FLASH_ATTN"

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        if meta.q_positions is not None:
            raise NotImplementedError(f"{self.label}: explicit q_positions (MTP drafts) are not supported")
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        qi = quant_inputs(self.group.descale, q, k_cache, layer)
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        ds = [expand_descale(d, b, hkv) for d in (qi.q_descale, qi.k_descale, qi.v_descale)]
        out = self._call(qi.q, kc, vc, meta, bt, layer, ds, causal=True, out_dtype=qi.out_dtype)
        sp = span_pass(meta)
        if sp is not None:
            sub_ds = [select_descale(d, sp.batch_index) for d in ds]
            out[sp.rows] = self._call(qi.q[sp.rows], kc, vc, sp.meta, bt[sp.batch_index], layer, sub_ds,
                                      causal=False, out_dtype=qi.out_dtype)
        return out

    def _call(self, q, kc, vc, meta, bt, layer, descales, *, causal: bool, out_dtype) -> torch.Tensor:
        raise NotImplementedError

    def supports_cuda_graphs(self) -> bool:
        return True  # no host syncs in a causal call; FA3/FA4/fork capture was measured on the H200


class FlashAttn3Backend(_FlashAttnBase):
    label = "FLASH_ATTN v3"

    def __init__(self, group):
        super().__init__(group)
        try:  # a selection that names a build (an objective's choice, vocab.ALT_BUILDS) runs that one, never another
            self.build = loader.load_fa3(group.build) if group.build else loader.load_fa3()
        except (ImportError, ValueError) as e:  # ValueError: a bad KSELECT_FA3_BUILD, reported the same way
            raise BackendUnavailableError(str(e).splitlines()[0]) from e
        self.kernel_build = self.build.label
        if _fp8_group(group) and group.descale != "q_k_v":
            raise ValueError("FLASH_ATTN v3 with an FP8 KV cache needs quant-query (descale 'q_k_v'): "
                             "the FA3 build requires q, k and v in the same dtype")

    def _call(self, q, kc, vc, meta, bt, layer, descales, *, causal, out_dtype):
        qd, kd, vd = descales
        return fa.fa3_forward(
            q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, meta.max_seqlen_q, meta.max_seqlen_k,
            layer.softmax_scale, causal=causal, window_left=layer.window_left, sinks=layer.sinks,
            q_descale=qd, k_descale=kd, v_descale=vd, out_dtype=out_dtype, build=self.build)


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
        self.kernel_build = f"{loader.VLLM_PKG} (FA4 fork)" if self.fork else "flash-attn-4"

    def _call(self, q, kc, vc, meta, bt, layer, descales, *, causal, out_dtype):
        args = (q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, meta.max_seqlen_q, meta.max_seqlen_k,
                layer.softmax_scale)
        if not self.fork:
            return fa.fa4_forward(*args, causal=causal, window_left=layer.window_left, sinks=layer.sinks,
                                  out_dtype=out_dtype)
        _, kd, vd = descales  # the fork dequantizes K/V in the kernel: q stays in the model dtype
        return fa.fa4_fork_forward(*args, causal=causal, window_left=layer.window_left, sinks=layer.sinks,
                                   k_descale=kd, v_descale=vd, out_dtype=out_dtype)
