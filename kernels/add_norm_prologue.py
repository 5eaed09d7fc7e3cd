"""Gemma's sandwich add-norm computed in the prologue of the projection that reads it (kernels/gemv.py).

    s = (res + norm(y) * w_a) [* scalar]          written once (by program 0): the residual stream
    x = norm(s) * w_b   (s itself without w_b)    what the projection multiplies W by, never written

Why: in a one-token decode step each add-norm is its own 2.3 us kernel between two projections, 128 of them in
an E4B step (bench/results/h100/skinny/T_b1/timeline.md). Every GEMV program already reads all of x; here it
reads y and res instead, reduces both norms itself (x is 2,560 values) and rebuilds each x chunk in its main loop
(L1/L2 hits), so the step loses the norm kernels and their launches. Measured on the H100 it lost: a GEMV program
owns 2 to 8 rows of W, so rebuilding x reads more bytes than its W slice, and the GEMVs slowed by more than the
norms took (bench/results/h100/fold/). gemma4/fused.py keeps it off (FOLD_NORMS). Each value is rounded where
kernels/rms_norm.py rounds it, in the same order: the result equals that kernel then the GEMV, up to the fp32
order of the two norms' sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .triton_round import round_like

MAX_K = 8192  # every program holds x's row in registers for the norms: Gemma-4's widest hidden size is 5,376


@dataclass(frozen=True)
class AddNorm:
    """An add-norm whose result a projection computes in its prologue: y, res [M, K] and `out` [M, K] (s, written
    by the projection); w_a, w_b [K] or None; scalar a one-element tensor, a number or None."""

    y: torch.Tensor
    res: torch.Tensor
    w_a: torch.Tensor | None
    eps: float
    scalar: torch.Tensor | float | None
    w_b: torch.Tensor | None
    out: torch.Tensor

    @property
    def shape(self):
        return self.y.shape

    def kernel_args(self) -> dict:
        """The projection kernels' prologue arguments (kernels/gemv.py)."""
        y, on_device = self.y, self.scalar is None or isinstance(self.scalar, torch.Tensor)
        return dict(res_ptr=self.res, wa_ptr=y if self.w_a is None else self.w_a,
                    wb_ptr=y if self.w_b is None else self.w_b,
                    scalar=(y if self.scalar is None else self.scalar) if on_device else float(self.scalar),
                    s_ptr=self.out, stride_res=self.res.stride(0), stride_s=self.out.stride(0), eps=float(self.eps),
                    PRENORM=True, HAS_WA=self.w_a is not None, HAS_SCALAR=self.scalar is not None,
                    SCALAR_PTR=on_device, HAS_WB=self.w_b is not None, K_PAD=triton.next_power_of_2(y.shape[1]))


def fits(y: torch.Tensor, res: torch.Tensor) -> bool:
    """Whether a projection can take this add-norm in its prologue: 2-D rows of at most MAX_K, unit column stride."""
    return (y.dim() == 2 and res.shape == y.shape and y.shape[1] <= MAX_K and y.stride(1) == 1
            and res.stride(1) == 1 and res.dtype == y.dtype)


def plain_args(x: torch.Tensor) -> dict:
    """The prologue arguments of a projection of a plain x (PRENORM off; the pointers are placeholders)."""
    return dict(res_ptr=x, wa_ptr=x, wb_ptr=x, scalar=x, s_ptr=x, stride_res=0, stride_s=0, eps=0.0, PRENORM=False,
                HAS_WA=False, HAS_SCALAR=False, SCALAR_PTR=True, HAS_WB=False, K_PAD=1)


@triton.jit
def _s_chunk(y, rstd_y, res_row, wa_ptr, scal, c, c_ok, ref_ptr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr):
    """s for columns c, rounded as kernels/rms_norm.py rounds it."""
    n = y * rstd_y
    if HAS_WA:
        n = n * tl.load(wa_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    s = round_like(n, ref_ptr)
    s = round_like(tl.load(res_row + c, mask=c_ok, other=0.0).to(tl.float32) + s, ref_ptr)
    if HAS_SCALAR:
        s = round_like(s * scal, ref_ptr)
    return s


@triton.jit
def stats(y_row, res_row, wa_ptr, scal, s_row, k, eps, write_k, ref_ptr, K_PAD: tl.constexpr, HAS_WA: tl.constexpr,
          HAS_SCALAR: tl.constexpr, HAS_WB: tl.constexpr):
    """(rstd of y, rstd of s) of one row; s's first write_k columns stored (k in one program of a launch, else 0)."""
    c = tl.arange(0, K_PAD)
    ok = c < k
    y = tl.load(y_row + c, mask=ok, other=0.0).to(tl.float32)
    rstd_y = tl.rsqrt(tl.sum(y * y, axis=0) / k + eps)
    s = _s_chunk(y, rstd_y, res_row, wa_ptr, scal, c, ok, ref_ptr, HAS_WA, HAS_SCALAR)
    tl.store(s_row + c, s.to(s_row.dtype.element_ty), mask=c < write_k)
    rstd_s = rstd_y
    if HAS_WB:
        rstd_s = tl.rsqrt(tl.sum(s * s, axis=0) / k + eps)
    return rstd_y, rstd_s


@triton.jit
def x_chunk(x_row, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, c, c_ok, ref_ptr, PRENORM: tl.constexpr,
            HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr, HAS_WB: tl.constexpr):
    """Columns c of the projection's x in fp32: loaded (PRENORM off), or rebuilt from y (x_row) and res."""
    x = tl.load(x_row + c, mask=c_ok, other=0.0).to(tl.float32)
    if PRENORM:
        x = _s_chunk(x, rstd_y, res_row, wa_ptr, scal, c, c_ok, ref_ptr, HAS_WA, HAS_SCALAR)
        if HAS_WB:
            x = round_like(x * rstd_s * tl.load(wb_ptr + c, mask=c_ok, other=0.0).to(tl.float32), ref_ptr)
    return x
