"""Rope's cos and sin tables for a step's positions in one Triton kernel, where PyTorch takes three (the product of
positions and frequencies, cos, sin).

freqs = float(position) * inv in fp32, as PyTorch multiplies integer positions by fp32 (or widened 16-bit) frequencies;
cos and sin in fp32, rounded once to the output dtype as `torch.cos(freqs, out=...)` rounds. On the GPU cos and sin are
libdevice's cosf and sinf, the functions PyTorch's CUDA kernels call (Triton's own tl.cos / tl.sin may lower to the
approximate instructions, whose error grows with the argument: positions reach 1e6); the interpreter uses tl.cos /
tl.sin (numpy).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import pdl
from .pdl import wait_then_release
from .triton_round import round_like


@triton.jit
def _rope_tables_kernel(pos_ptr, inv_ptr, cos_ptr, sin_ptr, f, stride_out, BLOCK: tl.constexpr, EXACT: tl.constexpr,
                        PDL: tl.constexpr):
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < f
    inv = tl.load(inv_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # a buffer, not written by any kernel: before
    wait_then_release(PDL)  # the positions are the step's input
    row = tl.program_id(0).to(tl.int64)
    fr = tl.load(pos_ptr + row).to(tl.float32) * inv
    if EXACT:
        c, s = libdevice.cos(fr), libdevice.sin(fr)
    else:
        c, s = tl.cos(fr), tl.sin(fr)
    dt = cos_ptr.dtype.element_ty
    tl.store(cos_ptr + row * stride_out + offs, round_like(c, cos_ptr).to(dt), mask=mask)
    tl.store(sin_ptr + row * stride_out + offs, round_like(s, sin_ptr).to(dt), mask=mask)


def rope_tables(positions: torch.Tensor, inv: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] (integers), inv [F] frequencies -> (cos, sin) [T, F] in `dtype`."""
    if positions.dim() != 1 or positions.dtype.is_floating_point or inv.dim() != 1 or inv.stride(0) != 1:
        raise ValueError(f"rope_tables needs integer positions [T] and contiguous frequencies [F], got positions "
                         f"{tuple(positions.shape)} {positions.dtype} and frequencies {tuple(inv.shape)}")
    t, f = positions.shape[0], inv.shape[0]
    cos = torch.empty(t, f, dtype=dtype, device=inv.device)
    sin = torch.empty_like(cos)
    block = min(1024, triton.next_power_of_2(f))
    if t:
        _rope_tables_kernel[(t, triton.cdiv(f, block))](positions, inv, cos, sin, f, cos.stride(0), BLOCK=block,
                                                        EXACT=inv.is_cuda, num_warps=4, **pdl.args(cos))
    return cos, sin
