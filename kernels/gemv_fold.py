"""A one-row projection of an add-norm's output with the add-norm folded into its sums (no kernel for the norm):

    s = (res + norm(y) * wa) [* c]                the residual stream (stored a K chunk a program)
    x = norm(s) * wb                              what the projection reads, never formed
    x @ W.T = beta * c * (A + alpha * B),  A = W' . res,  B = W' . (y * wa),  W' = W * wb (columns, made once)
    alpha = rsqrt(mean(y^2) + eps),  beta = rsqrt(c^2 (sum res^2 + 2 alpha sum res*y*wa + alpha^2 sum (y*wa)^2) / K + eps)

Why: in a one-token decode step each add-norm is a dependent step between two projections (2.7-3.2 us a call
before gate/up and q/k/v, bench/results/h100/ple_block/). kernels/add_norm_prologue.py computed the norm in the
next projection's prologue and lost: every program reduced both norms before its main loop, then rebuilt x from four
vectors a chunk. Here the norms' sums ride along in the projection's one pass (three vectors a chunk, no prologue),
and the scalars apply at the end. W' absorbs the norm weight. The price is rounding: x is never rounded to the
activation dtype (the unfused ops round s and x), and W' is rounded once, so results differ from those ops by about
one rounding of x, not bit for bit; s, the residual, is rounded where kernels/rms_norm.py rounds it.

`paired` is the same for GeGLU's concatenated [Wg'; Wu'] with GELU*up in the epilogue (kernels/gemv.py). Measured
on the H100 it lost (0.936x at E4B batch 1): three vectors a chunk and, paired, four accumulators made the projections
slower than the norms they absorbed (bench/results/h100/norm_fold/). gemma4/fused.py keeps it off (NORM_FOLD).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import pdl
from .gelu_mul import gelu_mul_rounded
from .pdl import wait_then_release
from .rms_norm import scalar_value
from .switches import launch_switched
from .triton_round import round_like

BLOCK_N = 8  # rows of W' a program (a half's rows when paired): the three vectors a chunk are shared by more rows
BLOCK_K = 512
WARPS = 4


def configured(block_n: int, block_k: int, warps: int):
    """Other launch parameters inside (a measurement's variant; a CUDA graph captured inside keeps them)."""
    return launch_switched(globals(), "gemv_fold", BLOCK_N=block_n, BLOCK_K=block_k, WARPS=warps)


@dataclass(frozen=True)
class FoldedNorm:
    """An add-norm (res + norm(y) * w_a) [* scalar], then norm(.) * w_b, whose projection folds it: y, res [1, K];
    w_a, w_b [K] (w_b given); scalar a one-element tensor, a number or None; out [1, K] where s goes."""

    y: torch.Tensor
    res: torch.Tensor
    w_a: torch.Tensor | None
    eps: float
    scalar: torch.Tensor | float | None
    w_b: torch.Tensor
    out: torch.Tensor

    @property
    def shape(self):
        return self.y.shape

    @staticmethod
    def fits(y: torch.Tensor, res: torch.Tensor, w_b) -> bool:
        return (w_b is not None and y.dim() == 2 and y.shape[0] == 1 and res.shape == y.shape and y.dtype == res.dtype
                and y.stride(1) == 1 and res.stride(1) == 1)


def folded_weight(w: torch.Tensor, w_b: torch.Tensor) -> torch.Tensor:
    """W' = W * w_b over W's columns, computed in fp32 and rounded once to W's dtype."""
    return (w.float() * w_b.float()[None, :]).to(w.dtype)


@triton.jit
def _vectors(r_row, y_row, wa_ptr, c, ok, HAS_WA: tl.constexpr):
    r = tl.load(r_row + c, mask=ok, other=0.0).to(tl.float32)
    y = tl.load(y_row + c, mask=ok, other=0.0).to(tl.float32)
    u = y
    if HAS_WA:
        u = y * tl.load(wa_ptr + c, mask=ok, other=0.0).to(tl.float32)
    return r, y, u


@triton.jit
def _fold_out(a, b, alpha, beta, cs):
    return beta * cs * (tl.sum(a, axis=1) + alpha * tl.sum(b, axis=1))


@triton.jit
def _store_s(r_row, y_row, wa_ptr, s_row, alpha, cs, k, BLOCK_K: tl.constexpr, HAS_WA: tl.constexpr,
             HAS_SCALAR: tl.constexpr):
    """s, rounded as kernels/rms_norm.py's add_norm_values rounds it: this program's K chunks of it (chunk pid, then
    every num_programs-th), read again from L2 after the main loop. Spread so, it costs one round trip in the first
    programs; one program writing all of s would end a one-wave projection several round trips late."""
    cols = tl.arange(0, BLOCK_K)
    for k0 in range(tl.program_id(0) * BLOCK_K, k, tl.num_programs(0) * BLOCK_K):
        c = k0 + cols
        ok = c < k
        v = tl.load(y_row + c, mask=ok, other=0.0).to(tl.float32) * alpha
        if HAS_WA:
            v = v * tl.load(wa_ptr + c, mask=ok, other=0.0).to(tl.float32)
        s = round_like(tl.load(r_row + c, mask=ok, other=0.0).to(tl.float32) + round_like(v, s_row), s_row)
        if HAS_SCALAR:
            s = round_like(s * cs, s_row)
        tl.store(s_row + c, s.to(s_row.dtype.element_ty), mask=ok)


@triton.jit
def _gemv_fold_kernel(r_ptr, y_ptr, wa_ptr, scalar, s_ptr, w_ptr, out_ptr, n, k, up_row, stride_w, eps,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PAIRED: tl.constexpr, HAS_WA: tl.constexpr,
                      HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    cols = tl.arange(0, BLOCK_K)
    g_rows = w_ptr + rows.to(tl.int64)[:, None] * stride_w
    u_rows = w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w
    first = row_ok[:, None] & (cols < k)[None, :]
    g0 = tl.load(g_rows + cols[None, :], mask=first, other=0.0).to(tl.float32)  # weights before the PDL wait
    u0 = g0
    if PAIRED:
        u0 = tl.load(u_rows + cols[None, :], mask=first, other=0.0).to(tl.float32)
    wait_then_release(PDL)
    r, y, u = _vectors(r_ptr, y_ptr, wa_ptr, cols, cols < k, HAS_WA)
    ga, gb = g0 * r[None, :], g0 * u[None, :]
    ua, ub = u0 * r[None, :], u0 * u[None, :]
    syy, srr, sru, suu = y * y, r * r, r * u, u * u
    for k0 in range(BLOCK_K, k, BLOCK_K):
        c = k0 + cols
        ok = c < k
        m = row_ok[:, None] & ok[None, :]
        r, y, u = _vectors(r_ptr, y_ptr, wa_ptr, c, ok, HAS_WA)
        w = tl.load(g_rows + c[None, :], mask=m, other=0.0).to(tl.float32)
        ga += w * r[None, :]
        gb += w * u[None, :]
        if PAIRED:
            w = tl.load(u_rows + c[None, :], mask=m, other=0.0).to(tl.float32)
            ua += w * r[None, :]
            ub += w * u[None, :]
        syy += y * y
        srr += r * r
        sru += r * u
        suu += u * u
    alpha = tl.rsqrt(tl.sum(syy, axis=0) / k + eps)
    cs = 1.0
    if HAS_SCALAR:
        cs = scalar_value(scalar, SCALAR_PTR)
    sss = cs * cs * (tl.sum(srr, axis=0) + 2.0 * alpha * tl.sum(sru, axis=0) + alpha * alpha * tl.sum(suu, axis=0))
    beta = tl.rsqrt(sss / k + eps)
    g = round_like(_fold_out(ga, gb, alpha, beta, cs), out_ptr)
    if PAIRED:
        g = gelu_mul_rounded(g, round_like(_fold_out(ua, ub, alpha, beta, cs), out_ptr), out_ptr)
    tl.store(out_ptr + rows, g.to(out_ptr.dtype.element_ty), mask=row_ok)
    _store_s(r_ptr, y_ptr, wa_ptr, s_ptr, alpha, cs, k, BLOCK_K, HAS_WA, HAS_SCALAR)


def gemv_fold(f: FoldedNorm, w_folded: torch.Tensor, paired: bool = False) -> torch.Tensor:
    """[1, N] = x @ W.T for x the add-norm `f` describes, from W' = folded_weight(W, f.w_b) [N, K]; paired: W' is
    GeGLU's [Wg'; Wu'] and the result gelu_tanh(x @ Wg.T) * (x @ Wu.T) [1, N/2]. s is written to f.out."""
    k = f.y.shape[1]
    if not FoldedNorm.fits(f.y, f.res, f.w_b) or w_folded.dim() != 2 or w_folded.shape[1] != k \
            or w_folded.stride(1) != 1 or (paired and w_folded.shape[0] % 2):
        raise ValueError(f"gemv_fold needs one row y, res [1, K] and W' [N, K] of unit column stride (even N when "
                         f"paired), got y {tuple(f.y.shape)}, res {tuple(f.res.shape)}, W' {tuple(w_folded.shape)}")
    n = w_folded.shape[0] // 2 if paired else w_folded.shape[0]
    out = torch.empty(1, n, dtype=f.y.dtype, device=f.y.device)
    on_device = f.scalar is None or isinstance(f.scalar, torch.Tensor)
    scalar = (f.y if f.scalar is None else f.scalar) if on_device else float(f.scalar)
    _gemv_fold_kernel[(triton.cdiv(n, BLOCK_N),)](
        f.res, f.y, f.y if f.w_a is None else f.w_a, scalar, f.out, w_folded, out, n, k, n, w_folded.stride(0),
        float(f.eps), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, PAIRED=paired, HAS_WA=f.w_a is not None,
        HAS_SCALAR=f.scalar is not None, SCALAR_PTR=on_device, num_warps=WARPS, **pdl.args(f.y))
    return out
