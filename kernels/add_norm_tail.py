"""Gemma's sandwich add-norm computed by the last program of the projection before it (kernels/gemv.py).

    y = x @ W.T                                   every program writes its rows of y, as a plain GEMV
    s = (res + norm(y) * w_a) [* scalar]          the last program to finish: the residual stream
    n = norm(s) * w_b   (when w_b is given)       ... and the next projection's input

Why: in a one-token decode step the add-norm after o_proj, down_proj and the per-layer projection is its own kernel
between two projections (126 of them in an E4B step). Under PDL a kernel may start early only beside the one
right before it, so the projection after the norm starts its weight reads beside a 2 us norm, not beside the
projection's tail. Here the projection's programs count themselves out on one counter; the last one reads y back
from L2 and writes s and n. That is one kernel boundary fewer and the next projection launches beside this one.
kernels/add_norm_prologue.py is the other direction (every program of the next projection recomputing the norm),
which measured slower (bench/results/h100/fold/). This measured slower too: 0.806x at E4B batch 1 on the H100, each
GEMV that carries a tail 8.2 us longer, where the norm kernel took 2.2 us (bench/results/h100/kselect_triton/): one
program of four warps walks the row in chunked passes. gemma4/fused.py keeps it off (TAIL_NORMS).

The row is worked in TAIL_CHUNK-column chunks (norm, then s, then n, each chunk reloaded): the projection's programs
all hold the registers of their largest path, and a whole 2,560-value row of five tensors would cut how many fit on
an SM (and one row's launches are capped at the projection's own registers: MAXNREG_ONE_ROW). Values are rounded where kernels/rms_norm.py rounds them, in the same order; the two norms' fp32 sums are taken
chunk by chunk, so a value may differ from that kernel's by the last bit of its norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .rms_norm import scalar_value
from .triton_round import round_like

MAX_N = 8192  # Gemma-4's widest hidden size is 5,376
CHUNK = 512
TAIL_CHUNK = tl.constexpr(CHUNK)  # in the kernel

# One row (a one-token step): the projection's programs are capped at the registers they use without the tail
# (56 at E4B's o_proj and down_proj configs, 48-56 elsewhere; 78-80 with it, uncapped, which fits 6 programs an
# SM instead of 9). The tail then keeps what does not fit in local memory; one program a launch runs it.
MAXNREG_ONE_ROW = 56

# device -> one int32 counter, zero between launches (the last program resets it). One a device: the projections
# with a tail run on one stream, and under PDL each waits for the kernel before it before it counts itself out.
_COUNTERS: dict = {}


def counter(device: torch.device) -> torch.Tensor:
    if device not in _COUNTERS:
        _COUNTERS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return _COUNTERS[device]


@dataclass(frozen=True)
class AddNormTail:
    """The add-norm after a projection y [M, N]: res [M, N], w_a, w_b [N] or None, scalar a one-element tensor, a
    number or None; s [M, N] where s goes, n [M, N] where norm(s) * w_b goes (None without w_b)."""

    res: torch.Tensor
    w_a: torch.Tensor | None
    eps: float
    scalar: torch.Tensor | float | None
    w_b: torch.Tensor | None
    s: torch.Tensor
    n: torch.Tensor | None

    @staticmethod
    def fits(res: torch.Tensor, m: int, n: int) -> bool:
        """Whether a projection to [m, n] can end in this add-norm: res [m, n] of unit column stride, n <= MAX_N."""
        return res.dim() == 2 and tuple(res.shape) == (m, n) and n <= MAX_N and res.stride(1) == 1

    def kernel_args(self, y: torch.Tensor) -> dict:
        """The projection kernel's tail arguments for its output y."""
        on_device = self.scalar is None or isinstance(self.scalar, torch.Tensor)
        n = self.n if self.n is not None else self.s
        return dict(cnt_ptr=counter(y.device), t_res=self.res, t_wa=y if self.w_a is None else self.w_a,
                    t_wb=y if self.w_b is None else self.w_b,
                    t_scalar=(y if self.scalar is None else self.scalar) if on_device else float(self.scalar),
                    t_s=self.s, t_n=n, stride_tres=self.res.stride(0), stride_ts=self.s.stride(0),
                    stride_tn=n.stride(0), t_eps=float(self.eps), TAIL=True, T_HAS_WA=self.w_a is not None,
                    T_HAS_SCALAR=self.scalar is not None, T_SCALAR_PTR=on_device, T_HAS_WB=self.w_b is not None,
                    N_PAD=max(CHUNK, triton.next_power_of_2(y.shape[1])))


def no_tail_args(y: torch.Tensor) -> dict:
    """The tail arguments of a projection without one (TAIL off; the pointers are placeholders)."""
    return dict(cnt_ptr=y, t_res=y, t_wa=y, t_wb=y, t_scalar=y, t_s=y, t_n=y, stride_tres=0, stride_ts=0, stride_tn=0,
                t_eps=0.0, TAIL=False, T_HAS_WA=False, T_HAS_SCALAR=False, T_SCALAR_PTR=True, T_HAS_WB=False,
                N_PAD=CHUNK)


@triton.jit
def _row(y_row, res_row, wa_ptr, wb_ptr, sc, s_row, n_row, n, eps, N_PAD: tl.constexpr, HAS_WA: tl.constexpr,
         HAS_SCALAR: tl.constexpr, HAS_WB: tl.constexpr):
    """One row's add-norm from y (other programs' writes: read from L2, not L1), chunk by chunk."""
    c = tl.arange(0, TAIL_CHUNK)
    ss = 0.0
    for j in tl.static_range(0, N_PAD, TAIL_CHUNK):
        y = tl.load(y_row + j + c, mask=j + c < n, other=0.0, cache_modifier=".cg").to(tl.float32)
        ss += tl.sum(y * y, axis=0)
    rstd = tl.rsqrt(ss / n + eps)
    ss = 0.0
    for j in tl.static_range(0, N_PAD, TAIL_CHUNK):
        ok = j + c < n
        v = tl.load(y_row + j + c, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32) * rstd
        if HAS_WA:
            v = v * tl.load(wa_ptr + j + c, mask=ok, other=0.0).to(tl.float32)
        s = round_like(v, y_row)
        s = round_like(tl.load(res_row + j + c, mask=ok, other=0.0).to(tl.float32) + s, y_row)
        if HAS_SCALAR:
            s = round_like(s * sc, y_row)
        tl.store(s_row + j + c, s.to(s_row.dtype.element_ty), mask=ok)
        ss += tl.sum(s * s, axis=0)
    if HAS_WB:
        tl.debug_barrier()  # s is back in memory before it is read again
        rstd = tl.rsqrt(ss / n + eps)
        for j in tl.static_range(0, N_PAD, TAIL_CHUNK):
            ok = j + c < n
            s = tl.load(s_row + j + c, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
            v = round_like(s * rstd * tl.load(wb_ptr + j + c, mask=ok, other=0.0).to(tl.float32), y_row)
            tl.store(n_row + j + c, v.to(n_row.dtype.element_ty), mask=ok)


@triton.jit
def add_norm_tail(y_ptr, stride_y, n, cnt_ptr, t_res, t_wa, t_wb, t_scalar, t_s, t_n, stride_tres, stride_ts,
                  stride_tn, t_eps, M: tl.constexpr, N_PAD: tl.constexpr, HAS_WA: tl.constexpr,
                  HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr, HAS_WB: tl.constexpr):
    """Called by every program after it stored its rows of y: the last one to arrive computes the add-norm of every
    row of y and resets the counter for the next launch."""
    tl.debug_barrier()  # every thread's part of y is written before the release below
    last = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1
    if last:
        sc = 1.0
        if HAS_SCALAR:
            sc = scalar_value(t_scalar, SCALAR_PTR)
        for m in tl.static_range(M):
            _row(y_ptr + m * stride_y, t_res + m * stride_tres, t_wa, t_wb, sc, t_s + m * stride_ts,
                 t_n + m * stride_tn, n, t_eps, N_PAD, HAS_WA, HAS_SCALAR, HAS_WB)
        tl.store(cnt_ptr, 0)
