"""y = x @ W.T for a few rows of x (decode): one Triton kernel that streams W once.

Why: at batch 1 the decode step is weight reads, and E4B's per-layer projections are small (q/k/v 15.7 MB,
o 10.5 MB): cuBLAS ran them at 2.9 TB/s in the fused step (bench/results/h200/fusion/README.md).
Each program owns BLOCK_N rows of W and walks K in BLOCK_K chunks, keeping a [BLOCK_N, BLOCK_K] fp32
partial per row of x and reducing it once at the end; x is re-read from L2. The result is rounded once
to the output dtype (to nearest, kernels/triton_round.py), as cuBLAS rounds its fp32 accumulator.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kselect.kernels.triton_round import round_like

MAX_ROWS = 8  # more rows of x: a GEMM kernel (tensor cores) is the right tool


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, out_ptr, n, k, stride_x, stride_w, stride_out, M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    row_ok = rows < n
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * stride_w
    for m in tl.static_range(M):
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, k, BLOCK_K):
            c = k0 + cols
            c_ok = c < k
            w = tl.load(w_rows + c[None, :], mask=row_ok[:, None] & c_ok[None, :], other=0.0)
            xv = tl.load(x_ptr + m * stride_x + c, mask=c_ok, other=0.0)
            acc += w.to(tl.float32) * xv.to(tl.float32)[None, :]
        y = tl.sum(acc, axis=1)
        tl.store(out_ptr + m * stride_out + rows, round_like(y, out_ptr).to(out_ptr.dtype.element_ty), mask=row_ok)


def config(n: int, k: int) -> dict:
    """Block sizes by shape, the fastest measured per Gemma-4 projection on the H200
    (bench/results/h200/prefill_gemv/G/gemv.md): two rows of W a program over long K chunks for the small projections
    (more programs in flight), eight rows over 256 columns for the wide ones (N >= 16384) and for K <= 256."""
    return dict(block_n=8, block_k=256) if n >= 16384 or k <= 256 else dict(block_n=2, block_k=1024)


def gemv(x: torch.Tensor, w: torch.Tensor, block_n: int | None = None, block_k: int | None = None,
         num_warps: int = 4) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), w [N, K] with unit column stride -> x @ w.T [M, N] in x's dtype.
    Block sizes left out come from `config`.

    M > 1 re-reads W per row (from L2 for the later rows); it is meant for one to a few decode rows."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1] or x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError(f"gemv needs x [M, K] and w [N, K] with unit column stride, got {tuple(x.shape)} "
                         f"stride {x.stride()} and {tuple(w.shape)} stride {w.stride()}")
    m, k = x.shape
    if not 0 < m <= MAX_ROWS:
        raise ValueError(f"gemv takes 1 to {MAX_ROWS} rows of x, got {m}")
    n = w.shape[0]
    cfg = config(n, k)
    block_n, block_k = block_n or cfg["block_n"], block_k or cfg["block_k"]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, w, out, n, k, x.stride(0), w.stride(0), out.stride(0), M=m,
                                             BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps)
    return out
