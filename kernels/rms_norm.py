"""RMSNorm, and Gemma's sandwich "norm, add the residual, scale, norm again", as one Triton kernel.

    rms_norm(x, w)                          -> norm(x) * w
    add_rms_norm(y, res, w_a, scalar, w_b)  -> s = (res + norm(y) * w_a) * scalar,  n = norm(s) * w_b

norm(x) = x * (mean(x^2) + eps)^-0.5 over the last dim, in fp32. The weights stay in their stored
dtype and are widened in registers (no per-call cast kernel). Every intermediate the unfused
PyTorch code rounds to the activation dtype (the normed value, the sum, the scaled sum) is rounded
here too, so the result differs from it only by the fp32 reduction order.
One program per row. Runs in Triton's interpreter on CPU tensors (tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .pdl import release_late, wait_then_release
from .switches import switched
from .triton_round import round_like


@triton.jit
def scalar_value(scalar, SCALAR_PTR: tl.constexpr):
    """The scalar in fp32: read from its one-element tensor, or the number given."""
    if SCALAR_PTR:
        v = tl.load(scalar).to(tl.float32)
    else:
        v = scalar
    return v


@triton.jit
def add_norm_values(y, r, wa, wb, scalar, d, eps, ref_ptr, HAS_RES: tl.constexpr, HAS_WA: tl.constexpr,
                    HAS_SCALAR: tl.constexpr, HAS_WB: tl.constexpr):
    """(s, m) of one row in fp32, each rounded to ref_ptr's dtype where the unfused ops round: y, r (the residual),
    wa, wb (the weights) fp32 values of the row's BLOCK columns (zeros past d), scalar an fp32 number. m is s where
    not HAS_WB. kernels/add_norm_tail.py rounds at the same points, chunk by chunk."""
    n = y * tl.rsqrt(tl.sum(y * y, axis=0) / d + eps)
    if HAS_WA:
        n = n * wa
    s = round_like(n, ref_ptr)
    if HAS_RES:
        s = round_like(r + s, ref_ptr)
    if HAS_SCALAR:
        s = round_like(s * scalar, ref_ptr)
    m = s
    if HAS_WB:
        m = round_like(s * tl.rsqrt(tl.sum(s * s, axis=0) / d + eps) * wb, ref_ptr)
    return s, m


@triton.jit
def _add_rms_norm_kernel(y_ptr, res_ptr, wa_ptr, scalar, wb_ptr, out_ptr, outb_ptr,
                         D, stride_y, stride_res, stride_out, stride_outb, eps,
                         HAS_RES: tl.constexpr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr,
                         SCALAR_PTR: tl.constexpr, HAS_WB: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
                         ZERO_Y: tl.constexpr = False, RES_EARLY: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    dt = out_ptr.dtype.element_ty
    wa = 1.0
    wb = 1.0
    if HAS_WA:  # weights before the PDL wait (kernels/pdl.py)
        wa = tl.load(wa_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_WB:
        wb = tl.load(wb_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = 0.0
    if RES_EARLY:  # written before the kernel before this one (see RES_EARLY below)
        r = tl.load(res_ptr + row * stride_res + offs, mask=mask, other=0.0).to(tl.float32)
    wait_then_release(PDL)
    y = tl.load(y_ptr + row * stride_y + offs, mask=mask, other=0.0).to(tl.float32)
    if ZERO_Y:  # an fp32 accumulator (kernels/gated_pair.py): rounded as a projection's output, left as zeros
        y = round_like(y, out_ptr)
        tl.store(y_ptr + row * stride_y + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=mask)
    if HAS_RES:
        if not RES_EARLY:
            r = tl.load(res_ptr + row * stride_res + offs, mask=mask, other=0.0).to(tl.float32)
    sc = 1.0
    if HAS_SCALAR:  # a one-element tensor (a model buffer) or an fp32 number
        sc = scalar_value(scalar, SCALAR_PTR)
    s, m = add_norm_values(y, r, wa, wb, sc, D, eps, out_ptr, HAS_RES, HAS_WA, HAS_SCALAR, HAS_WB)
    release_late(PDL)
    tl.store(out_ptr + row * stride_out + offs, s.to(dt), mask=mask)
    if HAS_WB:
        tl.store(outb_ptr + row * stride_outb + offs, m.to(dt), mask=mask)


# RES_EARLY: an add-norm launched with PDL reads its residual before the PDL wait, taking a DRAM read off the path
# after it. Safe only where every residual was written before the kernel before the add-norm (kernels/pdl.py: those
# kernels have completed), as in the fused decode step, where the residual is the layer's input or the sum of an
# add-norm two or more kernels back (gemma4/forward.py). Off: a tie in E4B's batch-1 step on the H100 (0.999x,
# bench/results/h100/kv_l2/). `res_before_wait(on)` sets it.
RES_EARLY = False


def res_before_wait(on: bool):
    """RES_EARLY inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), RES_EARLY=on)


ROW_WARPS = None  # warps per row program for every width (a measurement's switch); None: the rule below


def row_warps(block: int) -> int:
    """Warps per row program: ROW_WARPS where set, else one per 512 columns, 1 to 16
    (kselect/measurement/gemma4/fusion_tune.py measures the alternatives alone)."""
    return ROW_WARPS or max(1, min(16, block // 512))


def warps_per_row(n: int):
    """ROW_WARPS = n inside (a power of two, 1 to 32; a CUDA graph captured inside keeps it)."""
    if type(n) is not int or n < 1 or n > 32 or n & (n - 1):
        raise ValueError(f"rms_norm warps_per_row takes a power of two from 1 to 32, got {n!r}")
    return switched(globals(), ROW_WARPS=n)


def _rows(x: torch.Tensor) -> torch.Tensor:
    x = x.reshape(-1, x.shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


def _launch(y, res, w_a, scalar, w_b, eps, want_b, out=None, zero_y=False):
    shape = y.shape
    y2 = _rows(y)
    rows, d = y2.shape
    dtype = res.dtype if zero_y else y.dtype
    if zero_y and (y.dtype != torch.float32 or y2.data_ptr() != y.data_ptr()):
        raise ValueError(f"add_rms_norm zero_y needs an fp32 y with unit column stride, got {y.dtype} "
                         f"stride {tuple(y.stride())}")
    if out is None:
        out = torch.empty(rows, d, dtype=dtype, device=y.device)
    elif out.shape != (rows, d) or out.dtype != dtype or not out.is_contiguous():
        raise ValueError(f"add_rms_norm out must be a contiguous {dtype} [{rows}, {d}], got {out.dtype} "
                         f"{tuple(out.shape)}")
    outb = torch.empty_like(out) if want_b else out
    res2 = _rows(res) if res is not None else y2
    block = triton.next_power_of_2(d)
    on_device = scalar is None or isinstance(scalar, torch.Tensor)  # a tensor is read in the kernel, a number passed
    launch = pdl.args(out, late=True)
    if rows:
        _add_rms_norm_kernel[(rows,)](
            y2, res2, w_a if w_a is not None else y2, (y2 if scalar is None else scalar) if on_device else float(scalar),
            w_b if w_b is not None else y2, out, outb, d, y2.stride(0), res2.stride(0), out.stride(0),
            outb.stride(0), float(eps), HAS_RES=res is not None, HAS_WA=w_a is not None,
            HAS_SCALAR=scalar is not None, SCALAR_PTR=on_device,
            HAS_WB=w_b is not None, BLOCK=block, ZERO_Y=zero_y,
            RES_EARLY=RES_EARLY and res is not None and launch["PDL"] in (True, pdl.LATE),
            num_warps=row_warps(block), **launch)
    return out.view(shape), (outb.view(shape) if want_b else None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x [..., D] -> x * rsqrt(mean(x^2) + eps) [* weight], in x's dtype."""
    return _launch(x, None, weight, None, None, eps, False)[0]


def add_rms_norm(y: torch.Tensor, res: torch.Tensor, w_a: torch.Tensor | None, eps: float,
                 scalar: torch.Tensor | float | None = None,
                 w_b: torch.Tensor | None = None,
                 out: torch.Tensor | None = None, zero_y: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(s, n): s = (res + rms_norm(y, w_a)) [* scalar]; n = rms_norm(s, w_b) when w_b is given, else None.
    scalar: a one-element tensor (read on the device), or a number (applied in fp32, as `* 0.5` in PyTorch).
    out: where s goes (a contiguous [rows, D]; default a new tensor).
    zero_y: y is an fp32 accumulator (kernels/gated_pair.py): rounded to res's dtype first, then set to zeros."""
    return _launch(y, res, w_a, scalar, w_b, eps, w_b is not None, out, zero_y)
