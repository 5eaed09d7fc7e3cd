"""FlashInfer paged attention (flashinfer-python 0.7.2.post1) on our cache layout.

One `BatchPrefillWithPagedKVCacheWrapper` ("NHD": caches [pages, page_size, Hkv, D], as ours) serves
prefill, chunked prefill and decode (decode is a one-token prefill). FlashInfer splits a call into
`plan()` (host-side scheduling from the batch's page lists; never inside a graph capture) and
`run()`; one plan serves every layer that shares the batch metadata, window and dtypes. In
CUDA-graph mode (`graph_batch`) the plan fills fixed buffers, so a captured `run` replays a new plan.
backend="auto" lets FlashInfer pick its FA3 (SM90) kernels when q and KV share a dtype and the head
dim is <= 256, else its FA2 kernels (bf16 q over an FP8 cache; head dim 512).

First-call cost: every (q/kv/out dtype, head dim, window on/off, kernel family) JIT-compiles one
module with nvcc, ~90 s each on the H200 per the kernel probe (FLASHINFER_CUDA_ARCH_LIST=9.0a builds
for SM90 only, MAX_JOBS sets parallel nvcc). Compiled modules are cached under FLASHINFER_WORKSPACE_BASE
(default ~/.cache/flashinfer), so later processes load them in about a second.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

import torch

PACKAGE = "flashinfer-python==0.7.2.post1"


def load_flashinfer():
    try:
        return importlib.import_module("flashinfer")
    except ImportError as e:
        raise ImportError(f"FLASHINFER needs {PACKAGE} (module flashinfer; see README 'GPU kernels'): {e}") from e


def paged_kv_layout(block_table: torch.Tensor, seqused_k: torch.Tensor, page_size: int):
    """Our block table -> FlashInfer's page lists, all int32 on block_table's device:
    kv_indptr [B+1], kv_indices [sum of pages] (sequence i's pages, in order), last_page_len [B]."""
    lens = seqused_k.to(device=block_table.device, dtype=torch.int64)
    pages = (lens + page_size - 1) // page_size
    if lens.numel() and int(pages.max()) > block_table.shape[1]:
        raise ValueError(f"block table has {block_table.shape[1]} pages per sequence, a sequence needs "
                         f"{int(pages.max())} (page size {page_size})")
    indptr = torch.zeros(lens.numel() + 1, dtype=torch.int32, device=block_table.device)
    indptr[1:] = torch.cumsum(pages, 0)
    used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages[:, None]
    indices = block_table[used].to(torch.int32)  # row-major: sequence by sequence, pages in order
    last = torch.where(pages > 0, lens - (pages - 1) * page_size, torch.zeros_like(lens)).to(torch.int32)
    return indptr, indices, last


_PLANNED: set[tuple] = set()  # FlashInfer variants this process has planned


def jit_cache_dir() -> str:
    return os.path.join(os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~"), ".cache", "flashinfer")


def announce_jit(variant: tuple) -> None:
    """One line on stderr before the first plan of a variant: FlashInfer may JIT-compile it now, and
    a silent 30-150 s compile looks like a hang."""
    q, kv, _, d, window = variant
    name = lambda t: str(t).removeprefix("torch.")  # noqa: E731
    print(f"kselect: FlashInfer {name(q)} q / {name(kv)} KV, head {d}{', window' if window else ''}: first use in this "
          f"process; unless cached in {jit_cache_dir()}, nvcc compiles it now (30-150 s on the H200; "
          f"FLASHINFER_CUDA_ARCH_LIST={os.environ.get('FLASHINFER_CUDA_ARCH_LIST', 'unset')}, "
          f"MAX_JOBS={os.environ.get('MAX_JOBS', 'unset')})", file=sys.stderr, flush=True)


class PagedAttention:
    """A planned FlashInfer paged-attention call; `plan` again whenever the batch changes.

    graph_batch: CUDA-graph mode (FlashInfer's `use_cuda_graph`): the plan writes into fixed buffers
    for that many sequences and up to graph_pages pages, so a captured `run` replays correctly
    after each re-plan."""

    def __init__(self, device, workspace_bytes: int = 256 << 20, *, graph_batch: int | None = None,
                 graph_pages: int = 0):
        fi = load_flashinfer()
        self.workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
        bufs = {}
        if graph_batch is not None:
            i32 = dict(dtype=torch.int32, device=device)
            bufs = dict(use_cuda_graph=True, qo_indptr_buf=torch.zeros(graph_batch + 1, **i32),
                        paged_kv_indptr_buf=torch.zeros(graph_batch + 1, **i32),
                        paged_kv_indices_buf=torch.zeros(max(graph_pages, 1), **i32),
                        paged_kv_last_page_len_buf=torch.zeros(graph_batch, **i32))
        self.wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD", backend="auto", **bufs)
        self.device = torch.device(device)
        self._inflight = None  # the last graph re-plan's copies (see plan)

    def plan(self, cu_seqlens_q, seqused_k, block_table, *, num_q_heads: int, num_kv_heads: int, head_dim: int,
             page_size: int, softmax_scale: float, window_left: int, q_dtype, kv_dtype, out_dtype) -> None:
        indptr, indices, last = paged_kv_layout(block_table, seqused_k, page_size)
        variant = (q_dtype, kv_dtype, out_dtype, head_dim, window_left >= 0)
        first = variant not in _PLANNED
        if first:
            _PLANNED.add(variant)
            announce_jit(variant)
        cu, extra = cu_seqlens_q.to(torch.int32), {}
        async_host = indices.device.type == "cpu" and self.device.type == "cuda"
        if async_host:  # a re-plan from host metadata (CUDA-graph decode): see _pinned
            cu, indptr, indices, last, extra["seq_lens"] = self._pinned(cu, indptr, indices, last, seqused_k)
        t0 = time.perf_counter()
        self.wrapper.plan(
            cu, indptr, indices, last, num_q_heads, num_kv_heads, head_dim, page_size,
            causal=True, sm_scale=softmax_scale, window_left=window_left, q_data_type=q_dtype,
            kv_data_type=kv_dtype, o_data_type=out_dtype, **extra)
        if async_host:
            self._inflight = torch.cuda.Event()
            self._inflight.record()
        if first and time.perf_counter() - t0 > 5:
            print(f"kselect: FlashInfer module ready after {time.perf_counter() - t0:.0f} s (compiled; cached for "
                  "later processes)", file=sys.stderr, flush=True)

    def _pinned(self, cu, indptr, indices, last, seqused_k):
        """Host metadata as FlashInfer's plan copies it without a stream sync: a pageable host->device
        copy waits for all earlier GPU work, so every decode step's re-plan made the host wait for the
        previous step (host and GPU serialized). Pinned host tensors (and the page list already on the
        device) copy asynchronously. The plan also rewrites FlashInfer's pinned plan buffer, whose copy
        to the device runs in stream order: wait for the previous re-plan's copies first, so the host
        runs at most one step ahead and never overwrites a plan the GPU has not read yet."""
        if self._inflight is not None:
            self._inflight.synchronize()
        pin = lambda t: t.to(torch.int32).pin_memory()  # noqa: E731
        dev_indices = pin(indices).to(self.device, non_blocking=True)
        return pin(cu), pin(indptr), dev_indices, pin(last), pin(seqused_k)

    def launch_shape(self) -> str:
        """The plan's launch parameters (grid, splits): a CUDA graph replays the ones it captured."""
        return repr(getattr(self.wrapper, "_plan_info", None))

    def run(self, q, k_cache, v_cache, *, k_scale: float | None = None, v_scale: float | None = None):
        """FP8 caches: FlashInfer folds k_scale into the softmax scale and multiplies the output by v_scale."""
        return self.wrapper.run(q, (k_cache, v_cache), k_scale=k_scale, v_scale=v_scale)
