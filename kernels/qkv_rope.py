"""After the fused q/k/v projection, one Triton kernel per layer: per-head RMSNorm of q, k, v, rotary
embedding of q and k, and the paged KV-cache write (FP8 quantization included). On the quant-query
path (q_scale given) q leaves it already quantized, q_fp8 = clamp(q / q_scale) from the rounded q, as
kernels/quant_query.py would make it: one kernel launch a layer fewer.

qkv [T, (Hq + Hkv + Hkv) * D] holds q | k | v heads (K=V layers: q | k, and v is the norm of the raw
k). One program per (token, head row): q rows go to q_out [T, Hq, D]; k and v rows go straight to
the cache at slot_mapping[t] (padding slots < 0 are skipped in the kernel: no host sync). KV-shared
layers pass no cache and get q only.

The rotary tables cos/sin [T, D] (NeoX rotate-half layout) are the ones the unfused path uses, in
the activation dtype; the kernel rounds where PyTorch's unfused ops round (the normed head, x*cos,
rot*sin, their sum), so it differs from them only by the fp32 reduction order of the norm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .pdl import wait_then_release
from .dtypes import is_fp8
from .kv_write import scale_arg, store_kv_row
from .triton_round import round_like


@triton.jit
def norm_rope(src, t, w_ptr, cos_ptr, sin_ptr, stride_cs, offs, eps, ref_ptr, D: tl.constexpr,
              HAS_W: tl.constexpr, ROPE: tl.constexpr):
    """One head row normed (and rotated), rounded as the unfused ops round: src + offs its D columns, t its token
    (the rope tables' row). Rows too: src and t [M, 1] with offs [1, D] give [M, D], each row normed alone
    (kernels/triton_paged.py's q rows)."""
    half: tl.constexpr = D // 2
    x = tl.load(src + offs).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=-1, keep_dims=True) / D + eps)
    xn = x * rstd
    if HAS_W:
        xn = xn * tl.load(w_ptr + offs).to(tl.float32)
    xn = round_like(xn, ref_ptr)
    if ROPE:
        poffs = (offs + half) % D
        p = tl.load(src + poffs).to(tl.float32) * rstd
        if HAS_W:
            p = p * tl.load(w_ptr + poffs).to(tl.float32)
        p = round_like(p, ref_ptr)
        rot = tl.where(offs < half, -p, p)
        c = tl.load(cos_ptr + t * stride_cs + offs).to(tl.float32)
        s = tl.load(sin_ptr + t * stride_cs + offs).to(tl.float32)
        xn = round_like(round_like(xn * c, ref_ptr) + round_like(rot * s, ref_ptr), ref_ptr)
    return xn


@triton.jit
def _qkv_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_ptr, kc_ptr, vc_ptr, slot_ptr, ks_ptr, vs_ptr,
                qs_ptr, stride_t, stride_cs, stride_qt, hq, hkv, v_col, eps,
                D: tl.constexpr, HAS_KV: tl.constexpr, IS_FP8: tl.constexpr, SCALE_PER_HEAD: tl.constexpr,
                FMAX: tl.constexpr, QUANT_Q: tl.constexpr, QMAX: tl.constexpr, PDL: tl.constexpr):
    wait_then_release(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs = tl.arange(0, D)
    dt = q_ptr.dtype.element_ty
    row = qkv_ptr + t * stride_t
    if h < hq:
        q = norm_rope(row + h * D, t, qw_ptr, cos_ptr, sin_ptr, stride_cs, offs, eps, qkv_ptr, D, True, True)
        if QUANT_Q:
            q = tl.minimum(tl.maximum(tl.div_rn(q, tl.load(qs_ptr)), -QMAX), QMAX)  # IEEE division, as PyTorch
        tl.store(q_ptr + t * stride_qt + h * D + offs, q.to(dt))
    elif HAS_KV:
        slot = tl.load(slot_ptr + t)
        mask = offs < D
        if h < hq + hkv:
            kh = h - hq
            k = norm_rope(row + (hq + kh) * D, t, kw_ptr, cos_ptr, sin_ptr, stride_cs, offs, eps, qkv_ptr, D, True,
                          True)
            store_kv_row(kc_ptr, ks_ptr, slot, kh, hkv, k, offs, mask, D, IS_FP8, SCALE_PER_HEAD, FMAX)
        else:
            vh = h - hq - hkv
            v = norm_rope(row + v_col + vh * D, t, kw_ptr, cos_ptr, sin_ptr, stride_cs, offs, eps, qkv_ptr, D,
                           False, False)
            store_kv_row(vc_ptr, vs_ptr, slot, vh, hkv, v, offs, mask, D, IS_FP8, SCALE_PER_HEAD, FMAX)


def qkv_norm_rope_write(qkv: torch.Tensor, hq: int, hkv: int, d: int, q_weight: torch.Tensor,
                        k_weight: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                        k_cache: torch.Tensor | None = None, v_cache: torch.Tensor | None = None,
                        slot_mapping: torch.Tensor | None = None, k_scale=None, v_scale=None,
                        k_eq_v: bool = False, q_scale: torch.Tensor | None = None,
                        q_dtype: torch.dtype | None = None) -> torch.Tensor:
    """qkv [T, W] -> q [T, hq, d] (normed, rotated); k (normed, rotated) and v (normed) written to the caches.

    W = (hq + 2 hkv) d, or (hq + hkv) d when k_eq_v (v = norm of the raw k), or hq d without caches.
    q_scale (a one-element fp32 tensor) with q_dtype (an FP8 dtype): q comes back quantized with it."""
    if d & (d - 1):
        raise ValueError(f"head dim {d} is not a power of two")
    if qkv.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride(-1) != 1 or cos.stride(0) != sin.stride(0):
        raise ValueError("qkv_norm_rope_write needs unit column strides and cos/sin of one layout")
    t = qkv.shape[0]
    has_kv = k_cache is not None
    quant_q = q_scale is not None
    if quant_q and (not is_fp8(q_dtype) or q_scale.numel() != 1):
        raise ValueError(f"quantizing q needs one fp32 scale and an FP8 q_dtype, got {q_scale.numel()} elements "
                         f"and {q_dtype}")
    q = torch.empty(t, hq, d, dtype=q_dtype if quant_q else qkv.dtype, device=qkv.device)
    fp8 = has_kv and is_fp8(k_cache.dtype)
    ks, per_head = scale_arg(k_scale, hkv, qkv.device) if fp8 else (q, False)
    vs, _ = scale_arg(v_scale, hkv, qkv.device) if fp8 else (q, False)
    rows = hq + (2 * hkv if has_kv else 0)
    if t:
        _qkv_kernel[(t, rows)](
            qkv, q_weight, k_weight if has_kv else q_weight, cos, sin, q,
            k_cache if has_kv else q, v_cache if has_kv else q, slot_mapping if has_kv else q, ks, vs,
            q_scale if quant_q else q, qkv.stride(0), cos.stride(0), q.stride(0), hq, hkv, (hq if k_eq_v else hq + hkv) * d, float(eps),
            D=d, HAS_KV=has_kv, IS_FP8=fp8, SCALE_PER_HEAD=per_head,
            FMAX=float(torch.finfo(k_cache.dtype).max) if fp8 else 0.0, QUANT_Q=quant_q,
            QMAX=float(torch.finfo(q_dtype).max) if quant_q else 0.0, num_warps=4 if d >= 256 else 1, **pdl.args(q))
    return q
