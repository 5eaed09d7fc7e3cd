"""TRITON_ATTN: our Triton paged attention (kernels/triton_paged.py).

Runs on CUDA, or on CPU tensors under TRITON_INTERPRET=1 (slow; what CI uses).
"""

from __future__ import annotations

import os

import torch

from kselect.backends.base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams
from kselect.backends.common import expand_descale, kernel_block_view, quant_inputs


class TritonAttnBackend(AttentionBackend):
    name = "TRITON_ATTN"

    def __init__(self, group):
        super().__init__(group)
        try:
            from kselect.kernels import triton_paged
        except ImportError as e:
            raise BackendUnavailableError(f"TRITON_ATTN needs the triton package (pip install triton): {e}") from e
        if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendUnavailableError("TRITON_ATTN needs a CUDA GPU (or TRITON_INTERPRET=1, the slow CPU "
                                          "interpreter, set before triton is imported)")
        self.kernel = triton_paged

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        qi = quant_inputs(self.group.descale, q, k_cache, layer)
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        return self.kernel.paged_attention_triton(
            qi.q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, layer.softmax_scale,
            max_seqlen_q=meta.max_seqlen_q, max_seqlen_k=meta.max_seqlen_k, window_left=layer.window_left,
            mm_prefix=meta.mm_prefix, sinks=layer.sinks, q_descale=expand_descale(qi.q_descale, b, hkv),
            k_descale=expand_descale(qi.k_descale, b, hkv), v_descale=expand_descale(qi.v_descale, b, hkv),
            q_positions=meta.q_positions, out_dtype=qi.out_dtype)

    def supports_cuda_graphs(self) -> bool:
        return True  # launch grid depends only on shapes and max_seqlen_*; no host syncs
