"""TORCH_REFERENCE: the PyTorch oracle as a backend (CPU, and a slow but exact GPU fallback)."""

from __future__ import annotations

from .base import AttentionBackend, AttentionMetadata, LayerParams
from .common import kernel_block_view, quant_inputs
from ..kernels.reference import paged_attention


class TorchReferenceBackend(AttentionBackend):
    name = "TORCH_REFERENCE"

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        qi = quant_inputs(self.group.descale, q, k_cache, layer)
        return paged_attention(
            qi.q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, layer.softmax_scale,
            causal=True, window_left=layer.window_left, mm_prefix=meta.mm_prefix, sinks=layer.sinks,
            q_descale=qi.q_descale, k_descale=qi.k_descale, v_descale=qi.v_descale,
            q_positions=meta.q_positions, out_dtype=qi.out_dtype,
        )
