"""Paged KV-cache write as one Triton kernel: no host sync, padding slots (< 0) skipped in the kernel.

k/v [T, Hkv, D] go to cache[slot // block, slot % block, h, :] (the cache viewed flat as [S, Hkv, D]).
FP8 caches store clamp(x / scale, +-max) rounded to nearest even, as kernels/cache_ops.quantize does;
the scale is a one-element or per-kv-head fp32 tensor on the device (read in the kernel, so a
recalibrated scale needs no recapture).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .dtypes import is_fp8
from .pdl import wait_then_release



@triton.jit
def store_kv_row(cache_ptr, scale_ptr, slot, h, hkv, x, offs, mask, D: tl.constexpr,
                 IS_FP8: tl.constexpr, SCALE_PER_HEAD: tl.constexpr, FMAX: tl.constexpr):
    """Store one head row x (fp32 values already rounded to the activation dtype) at cache[slot, h]."""
    dt = cache_ptr.dtype.element_ty
    if IS_FP8:
        if SCALE_PER_HEAD:
            sc = tl.load(scale_ptr + h)
        else:
            sc = tl.load(scale_ptr)
        x = tl.minimum(tl.maximum(tl.div_rn(x, sc), -FMAX), FMAX)  # IEEE division: "/" is approximate on the GPU
    dst = cache_ptr + (slot.to(tl.int64) * hkv + h) * D + offs
    tl.store(dst, x.to(dt), mask=mask & ((offs * 0 + slot) >= 0))


@triton.jit
def _kv_write_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, ks_ptr, vs_ptr, hkv,
                     stride_kt, stride_kh, stride_vt, stride_vh, D: tl.constexpr, BLOCK: tl.constexpr,
                     IS_FP8: tl.constexpr, SCALE_PER_HEAD: tl.constexpr, FMAX: tl.constexpr, PDL: tl.constexpr):
    wait_then_release(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    slot = tl.load(slot_ptr + t)
    k = tl.load(k_ptr + t * stride_kt + h * stride_kh + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + t * stride_vt + h * stride_vh + offs, mask=mask, other=0.0).to(tl.float32)
    store_kv_row(kc_ptr, ks_ptr, slot, h, hkv, k, offs, mask, D, IS_FP8, SCALE_PER_HEAD, FMAX)
    store_kv_row(vc_ptr, vs_ptr, slot, h, hkv, v, offs, mask, D, IS_FP8, SCALE_PER_HEAD, FMAX)


def scale_arg(scale, hkv: int, device) -> tuple[torch.Tensor, bool]:
    """(fp32 device tensor, per-head?) for a cache scale given as None, a number or a tensor."""
    if scale is None:
        scale = 1.0
    s = scale if isinstance(scale, torch.Tensor) else torch.tensor(float(scale))
    if s.device != torch.device(device) or s.dtype != torch.float32:
        s = s.to(device=device, dtype=torch.float32)
    if s.numel() not in (1, hkv):
        raise ValueError(f"KV scale must have 1 or {hkv} (kv heads) elements, got {s.numel()}")
    return s.reshape(-1), s.numel() > 1 and hkv > 1


def write_kv_triton(k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    """k/v [T, Hkv, D] into paged caches [blocks, block_size, Hkv, D] at slot_mapping [T] (< 0: skipped)."""
    t, hkv, d = k.shape
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        k, v = k.contiguous(), v.contiguous()
    fp8 = is_fp8(k_cache.dtype)
    ks, per_head = scale_arg(k_scale, hkv, k.device) if fp8 else (k_cache, False)
    vs, _ = scale_arg(v_scale, hkv, k.device) if fp8 else (v_cache, False)
    if t:
        _kv_write_kernel[(t, hkv)](
            k, v, k_cache, v_cache, slot_mapping, ks, vs, hkv, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            D=d, BLOCK=triton.next_power_of_2(d), IS_FP8=fp8, SCALE_PER_HEAD=per_head,
            FMAX=float(torch.finfo(k_cache.dtype).max) if fp8 else 0.0, num_warps=4 if d >= 256 else 1,
            **pdl.args(k_cache))
