"""GeGLU's middle: gelu_tanh(gate) * up in one Triton kernel.

gate and up are two column ranges of one [T, 2I] projection (gate/up concatenated at load) or two
separate [T, I] tensors with their own row strides (the per-layer-input gate). gelu is computed in
fp32 and rounded to the activation dtype before the product, as PyTorch's unfused ops round it.
tanh(u) = 1 - 2 / (exp(2u) + 1) (absolute error ~1e-7 near 0): no libdevice call, so the kernel also runs in the interpreter.
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
def tanh_f32(u, EXACT: tl.constexpr):
    """tanh of fp32 u: libdevice's tanhf where EXACT (compiled kernels: the function PyTorch's CUDA tanh calls), else
    1 - 2 / (exp(2u) + 1) (absolute error ~1e-7 near 0; the interpreter has no libdevice)."""
    if EXACT:
        return libdevice.tanh(u)
    u = tl.minimum(tl.maximum(u, -15.0), 15.0)  # tanh is +-1 in fp32 there; no exp overflow
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def gelu_mul_rounded(g, u, ref_ptr):
    """gelu_tanh(g) * u for fp32 g, u already rounded to ref_ptr's dtype; rounded as PyTorch's two ops round."""
    th = tanh_f32(0.7978845608028654 * (g + 0.044715 * g * g * g), False)
    act = round_like(0.5 * g * (1.0 + th), ref_ptr)
    return round_like(act * u, ref_ptr)


@triton.jit
def _gelu_mul_kernel(g_ptr, u_ptr, out_ptr, n, stride_g, stride_u, stride_out, BLOCK: tl.constexpr,
                     PDL: tl.constexpr):
    wait_then_release(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + row * stride_g + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_u + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, gelu_mul_rounded(g, u, out_ptr).to(out_ptr.dtype.element_ty), mask=mask)


def gelu_tanh_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [T, I] (row-strided views allowed, unit column stride) -> gelu_tanh(gate) * up [T, I]."""
    if gate.shape != up.shape or gate.dim() != 2 or gate.stride(1) != 1 or up.stride(1) != 1:
        raise ValueError(f"gelu_tanh_mul needs two [T, I] tensors with unit column stride, got "
                         f"{tuple(gate.shape)} stride {gate.stride()} and {tuple(up.shape)} stride {up.stride()}")
    t, n = gate.shape
    out = torch.empty(t, n, dtype=gate.dtype, device=gate.device)
    block = min(2048, triton.next_power_of_2(n))
    if t:
        _gelu_mul_kernel[(t, triton.cdiv(n, block))](gate, up, out, n, gate.stride(0), up.stride(0), out.stride(0),
                                                     BLOCK=block, num_warps=4, **pdl.args(out))
    return out


def gelu_tanh_mul_packed(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] (gate first) -> gelu_tanh(gate) * up [T, I]."""
    i = gate_up.shape[-1] // 2
    return gelu_tanh_mul(gate_up[:, :i], gate_up[:, i:])
