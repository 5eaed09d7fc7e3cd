"""FLASHINFER adapter: FlashInfer's paged prefill kernels (kernels/flashinfer.py) for prefill and decode.

What it takes is what vLLM declares for FlashInfer off SM100: bf16/fp16 q (no quantized query: that
is the TRT-LLM path), one K and one V scale per layer for an FP8 cache (per-head scales raise), no
sinks, no mm-prefix spans. Each refusal is an error naming the reason, never a silent fallback.

Planning: FlashInfer's plan() is host-side. Eager batches are planned once per batch metadata and
group (the first layer plans, the others reuse it). A CUDA-graph runner's static metadata gets its
own FlashInfer call in CUDA-graph mode, re-planned in `prepare_replay` from host values before each
replay; if a re-plan would change the captured launch shape it raises (the engine then runs eager).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from .base import (AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams,
                                   ReplayShapeError)
from .common import kernel_block_table, kernel_block_view
from ..kernels import flashinfer as fi_kernels
from ..kernels.reference import is_fp8


class _ScaleCache:
    """FlashInfer takes scales as Python floats; reading a GPU scalar syncs, so read each layer's scale
    tensor once and again only after an in-place change (its _version). Holding the tensor keeps its id
    from being reused by another one."""

    def __init__(self, limit: int = 4096):
        self.seen: dict[int, tuple[torch.Tensor, int, float]] = {}
        self.limit = limit

    def get(self, d: torch.Tensor, name: str) -> float:
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


@dataclass
class _Plan:
    """One FlashInfer call and what its current plan was made from."""

    meta: AttentionMetadata | None = None  # eager: the last batch, kept alive so `is` identifies it
    call: fi_kernels.PagedAttention | None = None
    args: dict | None = None  # layer-side plan arguments (heads, dims, page, scale, window, dtypes)
    # CUDA-graph mode only: the runner's static metadata (weakly), host copies of its values
    # (cu_seqlens_q, seqused_k, block table in kv blocks), the kv block size, the captured launch shape
    ref: weakref.ref | None = None
    device: torch.device | None = None
    host: tuple | None = None
    kv_block: int = 0
    shape: str | None = None


def workspace_bytes(head_size: int) -> int:
    """FlashInfer's float workspace holds the split-KV partial outputs (q heads x tokens x head x fp32):
    256 MiB overflowed for one 4,096-token prompt at head 512 (bench/results/h200/perf_objective/perf.log)."""
    return (256 << 20) if head_size <= 256 else (1 << 30)


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
        self._eager = _Plan()
        self._graphs: dict[int, _Plan] = {}
        self._scales = _ScaleCache()

    def supports_cuda_graphs(self) -> bool:
        return True  # with prepare_replay before each replay

    def prepare_replay(self, meta, seqused_k, block_table) -> None:
        p = self._graph_plan(meta)
        if p is None:  # a new graph runner: its entry goes when its metadata does
            p = self._graphs[id(meta)] = _Plan(ref=weakref.ref(meta), device=meta.block_table.device)
            weakref.finalize(meta, self._graphs.pop, id(meta), None)
        cu = p.host[0] if p.host is not None else meta.cu_seqlens_q.cpu()  # static: read once
        p.host = (cu, torch.tensor(list(seqused_k), dtype=torch.int32), block_table.cpu())
        if p.args is not None:
            self._plan(p)

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        if meta.mm_prefix is not None:
            raise NotImplementedError("FLASHINFER: no bidirectional mm-prefix spans (vLLM declares none); "
                                      "select TRITON_ATTN or FLASH_ATTN v4 for vision inputs")
        if meta.q_positions is not None:
            raise NotImplementedError("FLASHINFER: explicit q_positions (MTP drafts) are not supported")
        if layer.sinks is not None:
            raise NotImplementedError("FLASHINFER: attention sinks need FlashInfer's SM100/SM12x kernels")
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        ks = vs = None
        if is_fp8(k_cache.dtype):  # unset scales are 1.0
            ks = 1.0 if layer.k_scale is None else self._scales.get(layer.k_scale, "K")
            vs = 1.0 if layer.v_scale is None else self._scales.get(layer.v_scale, "V")
        args = dict(num_q_heads=q.shape[1], num_kv_heads=kc.shape[2], head_dim=q.shape[2], page_size=kc.shape[1],
                    softmax_scale=layer.softmax_scale, window_left=layer.window_left, q_dtype=q.dtype,
                    kv_dtype=kc.dtype, out_dtype=q.dtype)
        p = self._graph_plan(meta)
        if p is None:  # an eager batch: plan once for the whole group
            p = self._eager
            if p.meta is not meta or p.args != args:
                if p.call is None:  # head 512 prefill splits need more than 256 MiB (4,096 tokens x 32 heads overflowed)
                    p.call = fi_kernels.PagedAttention(q.device, workspace_bytes=workspace_bytes(self.group.head_size))
                if meta.host is not None:  # no device->host copy: the host plans while the GPU runs
                    cu, used, table = meta.host
                    p.call.plan(cu, used, kernel_block_table(table, k_cache.shape[1], self.group.kernel_block_size), **args)
                else:
                    p.call.plan(meta.cu_seqlens_q, meta.seqused_k, bt, **args)
                p.meta, p.args = meta, args
        elif p.args != args:  # a graph runner's metadata: first layer call of its warm-up
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("FLASHINFER: the first call with CUDA-graph metadata must run before capture")
            p.args, p.kv_block, p.shape = args, k_cache.shape[1], None
            self._plan(p)
        return p.call.run(q, kc, vc, k_scale=ks, v_scale=vs)

    def _graph_plan(self, meta) -> _Plan | None:
        p = self._graphs.get(id(meta))
        return p if p is not None and p.ref() is meta else None

    def _plan(self, p: _Plan) -> None:
        cu, used, table = p.host
        bt = kernel_block_table(table, p.kv_block, self.group.kernel_block_size)
        if p.call is None:
            p.call = fi_kernels.PagedAttention(p.device, workspace_bytes(self.group.head_size), graph_batch=used.numel(),
                                               graph_pages=bt.numel())
        p.call.plan(cu, used, bt, **p.args)
        shape = p.call.launch_shape()
        if p.shape is None:
            p.shape = shape
        elif shape != p.shape:
            raise ReplayShapeError(f"FLASHINFER: the re-plan changed the captured launch shape ({p.shape} -> {shape}); "
                               "the CUDA graph cannot be replayed")
