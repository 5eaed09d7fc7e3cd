"""Quant-query as one Triton kernel: q_fp8 = clamp(q / q_scale, +-fp8max), rounded to nearest even.

The PyTorch form (kernels/cache_ops.quantize) is four kernels (float, divide, clamp, cast) on every
FP8 quant-query layer call. The scale is a one-element fp32 tensor read in the kernel, so a CUDA graph
needs no recapture when it is recalibrated.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .pdl import wait_then_release


@triton.jit
def _quant_query_kernel(q_ptr, out_ptr, scale_ptr, n_cols, stride_row, BLOCK: tl.constexpr, FMAX: tl.constexpr,
                        PDL: tl.constexpr):
    wait_then_release(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(q_ptr + row * stride_row + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.minimum(tl.maximum(tl.div_rn(x, tl.load(scale_ptr)), -FMAX), FMAX)  # IEEE division: "/" is approximate
    tl.store(out_ptr + row * n_cols + offs, x.to(out_ptr.dtype.element_ty), mask=mask)


def quantize_query_triton(q: torch.Tensor, q_scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """q [T, H, D] (rows may be strided, heads x dims contiguous) -> a contiguous fp8 [T, H, D]."""
    t, h, d = q.shape
    if q.stride(2) != 1 or q.stride(1) != d:
        q = q.contiguous()
    scale = q_scale.reshape(-1).to(device=q.device, dtype=torch.float32)
    if scale.numel() != 1:
        raise ValueError(f"quant-query takes one q scale, got {scale.numel()} elements")
    out = torch.empty((t, h, d), device=q.device, dtype=dtype)
    cols = h * d
    block = min(4096, triton.next_power_of_2(cols))
    if t:
        _quant_query_kernel[(t, triton.cdiv(cols, block))](q, out, scale, cols, q.stride(0), BLOCK=block,
                                                           FMAX=float(torch.finfo(dtype).max), num_warps=4,
                                                           **pdl.args(out))
    return out
