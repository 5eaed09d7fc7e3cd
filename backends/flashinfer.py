"""FLASHINFER adapter: FlashInfer's paged prefill kernels (kernels/flashinfer.py) for prefill and decode.

What it takes is what vLLM declares for FlashInfer off SM100: bf16/fp16 q (no quantized query: that
is the TRT-LLM path), one K and one V scale per layer for an FP8 cache (per-head scales raise), no
sinks, no mm-prefix spans. Each refusal is an error naming the reason, never a silent fallback.
"""

from __future__ import annotations

import torch

from backends.base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams
from backends.common import kernel_block_view
from kernels import flashinfer as fi_kernels
from kernels.reference import is_fp8


class _ScaleCache:
    """FlashInfer takes scales as Python floats; reading a GPU scalar syncs, so read each layer's scale
    tensor once and again only after an in-place change (its _version). Holding the tensor keeps its id
    from being reused by another one."""

    def __init__(self, limit: int = 4096):
        self.seen: dict[int, tuple[torch.Tensor, int, float]] = {}
        self.limit = limit

    def get(self, d: torch.Tensor | None, name: str) -> float | None:
        if d is None:
            return None
        if d.numel() != 1:
            raise ValueError(f"FLASHINFER takes one {name} scale per layer; got descales of shape "
                             f"{tuple(d.shape)} (per sequence and kv head): use FLASH_ATTN v3 or TRITON_ATTN for those")
        hit = self.seen.get(id(d))
        if hit is not None and hit[0] is d and hit[1] == d._version:
            return hit[2]
        if len(self.seen) >= self.limit:
            self.seen.clear()
        value = float(d)
        self.seen[id(d)] = (d, d._version, value)
        return value


class FlashInferBackend(AttentionBackend):
    name = "FLASHINFER"

    def __init__(self, group):
        super().__init__(group)
        if group.descale == "q_k_v":
            raise ValueError("FLASHINFER here runs FlashInfer's FA2/FA3 kernels, which take q in the model dtype; "
                             "a quantized query (descale 'q_k_v') needs its TRT-LLM kernels (SM100)")
        try:
            fi_kernels.load_flashinfer()
        except ImportError as e:
            raise BackendUnavailableError(str(e).splitlines()[0]) from e
        self._call: fi_kernels.PagedAttention | None = None
        self._plan_key: tuple | None = None
        self._plan_meta: AttentionMetadata | None = None  # kept alive so `is` identifies the batch
        self._scales = _ScaleCache()

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        if meta.mm_prefix is not None:
            raise NotImplementedError("FLASHINFER: no bidirectional mm-prefix spans (vLLM declares none); "
                                      "select TRITON_ATTN or FLASH_ATTN v4 for vision inputs")
        if meta.q_positions is not None:
            raise NotImplementedError("FLASHINFER: explicit q_positions (MTP drafts) are not supported")
        if layer.sinks is not None:
            raise NotImplementedError("FLASHINFER: attention sinks need FlashInfer's SM100/SM12x kernels")
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta.block_table, self.group.kernel_block_size)
        ks = vs = None
        if is_fp8(k_cache.dtype):  # unset scales are 1.0
            ks = 1.0 if layer.k_scale is None else self._scales.get(layer.k_scale, "K")
            vs = 1.0 if layer.v_scale is None else self._scales.get(layer.v_scale, "V")
        key = (layer.window_left, layer.softmax_scale, q.dtype, kc.dtype, tuple(kc.shape[1:]), tuple(q.shape[1:]))
        if self._call is None:
            self._call = fi_kernels.PagedAttention(q.device)
        if meta is not self._plan_meta or key != self._plan_key:  # once per batch for the whole group
            self._call.plan(meta.cu_seqlens_q, meta.seqused_k, bt, num_q_heads=q.shape[1], num_kv_heads=kc.shape[2],
                            head_dim=q.shape[2], page_size=kc.shape[1], softmax_scale=layer.softmax_scale,
                            window_left=layer.window_left, q_dtype=q.dtype, kv_dtype=kc.dtype, out_dtype=q.dtype)
            self._plan_meta, self._plan_key = meta, key
        return self._call.run(q, kc, vc, k_scale=ks, v_scale=vs)
