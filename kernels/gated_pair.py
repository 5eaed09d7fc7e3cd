"""One row's gated projection pair in one Triton kernel, added into an fp32 row:

    acc += (gelu_tanh(x @ Wg.T) * m) @ Wd.T      m = x @ Wu.T (GeGLU, w = [Wg; Wu]) or a given row (per-layer input)

Why: at batch 1 the gate/up GEMV and the down GEMV are two kernels, each with its own ramp and tail; on the H100
gate/up ran at 2,789 and down at 2,570 GB/s against the LM head's 3,165 (bench/results/h100/gemv_tma/). Here each
program owns slices of SLICE intermediate rows: it dots a slice's gate (and up) rows with x, rounds GELU*up to x's
dtype as kernels/gemv.py's epilogue does, multiplies it into Wd's matching SLICE inputs and keeps its share of the
output in registers. No program waits for another; at the end each adds its share into `acc` (fp32 atomics).

Wd is read through two strides: its own [N, I] layout (a slice is SLICE columns of every row) or a transposed copy
[I, N] (`down_t`: a slice is SLICE contiguous rows). `acc` must hold zeros: its reader, kernels/rms_norm.py's
add_rms_norm with `zero_y`, rounds it to the activation dtype as a GEMV's output is rounded and writes zeros back.
The fp32 sum over programs lands in the atomics' order, so results are not bit-reproducible run to run.

Measured slower on the H100: E4B's MLP pair ran at 0.952x the two GEMVs' speed with the transposed copy, 0.854x without,
and a decode step's graph check refused the run-to-run sums (bench/results/h100/gated_pair/). gemma4/fused.py keeps
it off (GATED_PAIR).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .gelu_mul import gelu_mul_rounded
from .pdl import wait_then_release
from .shape_override import ShapeOverride
from .triton_round import round_like


@triton.jit
def _dots(x_ptr, w_rows, row_ok, first, k, BLOCK_K: tl.constexpr):
    """fp32 dots of x with a slice's rows of W whose first BLOCK_K columns (`first`, fp32) are already read."""
    cols = tl.arange(0, BLOCK_K)
    acc = first * tl.load(x_ptr + cols, mask=cols < k, other=0.0).to(tl.float32)[None, :]
    for k0 in range(BLOCK_K, k, BLOCK_K):
        c = k0 + cols
        c_ok = c < k
        w = tl.load(w_rows + c[None, :], mask=row_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
        acc += w * tl.load(x_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def _first(w_rows, row_ok, k, BLOCK_K: tl.constexpr):
    cols = tl.arange(0, BLOCK_K)
    return tl.load(w_rows + cols[None, :], mask=row_ok[:, None] & (cols < k)[None, :], other=0.0).to(tl.float32)


@triton.jit
def _down_part(acc, wd_ptr, rows, row_ok, h, n, stride_di, stride_dn, OFF: tl.constexpr, WIDTH: tl.constexpr):
    """acc [WIDTH] += h [SLICE] @ Wd's rows `rows` over outputs OFF .. OFF + WIDTH (masked at n)."""
    outs = OFF + tl.arange(0, WIDTH)
    wd = tl.load(wd_ptr + rows.to(tl.int64)[:, None] * stride_di + outs[None, :] * stride_dn,
                 mask=row_ok[:, None] & (outs < n)[None, :], other=0.0).to(tl.float32)
    return acc + tl.sum(wd * h[:, None], axis=0)


@triton.jit
def _gated_pair_kernel(x_ptr, w_ptr, mul_ptr, wd_ptr, acc_ptr, inter, k, n, up_row, stride_w, stride_di, stride_dn,
                       SLICE: tl.constexpr, BLOCK_K: tl.constexpr, N_A: tl.constexpr, N_B: tl.constexpr,
                       PAIRED: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    j = tl.arange(0, SLICE)
    rows = pid * SLICE + j
    row_ok = rows < inter
    g0 = _first(w_ptr + rows.to(tl.int64)[:, None] * stride_w, row_ok, k, BLOCK_K)  # weights before the wait
    u0 = g0
    if PAIRED:
        u0 = _first(w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w, row_ok, k, BLOCK_K)
    wait_then_release(PDL)
    acc_a = tl.zeros((N_A,), dtype=tl.float32)
    acc_b = tl.zeros((N_B,), dtype=tl.float32)
    for s in range(pid, tl.cdiv(inter, SLICE), step):
        rows = s * SLICE + j
        row_ok = rows < inter
        g = round_like(_dots(x_ptr, w_ptr + rows.to(tl.int64)[:, None] * stride_w, row_ok, g0, k, BLOCK_K), x_ptr)
        if PAIRED:
            u = round_like(_dots(x_ptr, w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w, row_ok, u0, k,
                                 BLOCK_K), x_ptr)
        else:
            u = tl.load(mul_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        nxt = rows + step * SLICE  # the next slice's first chunk, read before this slice's down rows
        nxt_ok = nxt < inter
        g0 = _first(w_ptr + nxt.to(tl.int64)[:, None] * stride_w, nxt_ok, k, BLOCK_K)
        if PAIRED:
            u0 = _first(w_ptr + (nxt + up_row).to(tl.int64)[:, None] * stride_w, nxt_ok, k, BLOCK_K)
        h = tl.where(row_ok, gelu_mul_rounded(g, u, x_ptr), 0.0)
        acc_a = _down_part(acc_a, wd_ptr, rows, row_ok, h, n, stride_di, stride_dn, 0, N_A)
        if N_B > 1:
            acc_b = _down_part(acc_b, wd_ptr, rows, row_ok, h, n, stride_di, stride_dn, N_A, N_B)
    outs = tl.arange(0, N_A)
    tl.atomic_add(acc_ptr + outs, acc_a, mask=outs < n, sem="relaxed")
    if N_B > 1:
        outs = N_A + tl.arange(0, N_B)
        tl.atomic_add(acc_ptr + outs, acc_b, mask=outs < n, sem="relaxed")


def _split(n: int) -> tuple[int, int]:
    """n outputs as two power-of-two register rows: the largest power of two <= n, and the rest rounded up (1 if
    none), so E4B's 2,560 is 2,048 + 512 with no padding."""
    a = 1 << (n.bit_length() - 1)
    return a, (triton.next_power_of_2(n - a) if n > a else 1)


_override = ShapeOverride()
configured = _override.configured  # `with configured(fn)`: fn(inter, k)'s entries replace config's (benchmarks)


def config(inter: int, k: int) -> dict:
    """Launch parameters: SLICE intermediate rows a step, BLOCK_K columns a chunk, `programs` a grid (None: one per
    slice, at most 4 per SM). Inside `configured(fn)`, fn(inter, k)'s entries replace these."""
    return _override.apply(dict(slice=4, block_k=512, programs=None, num_warps=8), inter, k)


def programs_for(x: torch.Tensor, slices: int, programs: int | None) -> int:
    if programs is None:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        programs = 4 * sms
    return max(1, min(programs, slices))


def gated_pair(x: torch.Tensor, w: torch.Tensor, wd: torch.Tensor, acc: torch.Tensor, mul: torch.Tensor | None = None,
               *, down_t: bool = False, slice: int | None = None, block_k: int | None = None,
               programs: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """acc [1, N] fp32 (zeros) += (gelu_tanh(x @ Wg.T) * (x @ Wu.T if mul is None else mul)) @ Wd.T for one row x
    [1, K]. w: [Wg; Wu] [2I, K] (mul None) or Wg [I, K]; wd: Wd [N, I], or its transpose [I, N] contiguous where
    down_t. Returns acc."""
    inter = w.shape[0] // 2 if mul is None else w.shape[0]
    n = wd.shape[1] if down_t else wd.shape[0]
    wd_inter = wd.shape[0] if down_t else wd.shape[1]
    if (x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != w.shape[1] or x.stride(1) != 1 or w.stride(1) != 1
            or wd_inter != inter or acc.shape != (1, n) or acc.dtype != torch.float32 or not acc.is_contiguous()
            or (mul is not None and (mul.numel() != inter or mul.stride(-1) != 1))):
        raise ValueError(f"gated_pair needs x [1, K], w [{'I' if mul is not None else '2I'}, K], wd "
                         f"{'[I, N]' if down_t else '[N, I]'}, an fp32 acc [1, N] and mul [I]; got x {tuple(x.shape)}, "
                         f"w {tuple(w.shape)}, wd {tuple(wd.shape)}, acc {acc.dtype} {tuple(acc.shape)}")
    cfg = config(inter, x.shape[1])
    given = dict(slice=slice, block_k=block_k, programs=programs, num_warps=num_warps)
    cfg.update({key: v for key, v in given.items() if v is not None})
    slices = triton.cdiv(inter, cfg["slice"])
    n_a, n_b = _split(n)
    stride_di, stride_dn = (wd.stride(0), wd.stride(1)) if down_t else (wd.stride(1), wd.stride(0))
    _gated_pair_kernel[(programs_for(x, slices, cfg["programs"]),)](
        x, w, mul if mul is not None else x, wd, acc, inter, x.shape[1], n, inter, w.stride(0), stride_di, stride_dn,
        SLICE=cfg["slice"], BLOCK_K=cfg["block_k"], N_A=n_a, N_B=n_b, PAIRED=mul is None,
        num_warps=cfg["num_warps"], **pdl.args(acc))
    return acc
