"""KV-cache writes and FP8 quantization helpers (device-agnostic PyTorch)."""

from __future__ import annotations

import torch

from .dtypes import TORCH_DTYPES, is_fp8

def fp8_dtype(name: str) -> torch.dtype:
    dt = TORCH_DTYPES.get(name)
    if dt is None or not is_fp8(dt):
        raise ValueError(f"not an fp8 kv-cache dtype: {name!r} (use fp8, fp8_e4m3 or fp8_e5m2)")
    return dt


def _scale_like(scale, x: torch.Tensor) -> torch.Tensor:
    """A scalar or per-kv-head scale, shaped to broadcast over [T, Hkv, D]."""
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    if s.numel() == 1:
        return s.reshape(1, 1, 1)
    return s.reshape(1, -1, 1)


def quantize(x: torch.Tensor, scale, dtype: torch.dtype) -> torch.Tensor:
    """clamp(x / scale, +-fp8max).to(fp8); scale None means 1."""
    fmax = torch.finfo(dtype).max
    xf = x.float()
    if scale is not None:
        xf = xf / _scale_like(scale, x)
    return xf.clamp(-fmax, fmax).to(dtype)


def quantize_query(q: torch.Tensor, q_scale, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """Quant-query path: q_fp8 = q / q_scale (q_scale an fp32 scalar). On CUDA one Triton kernel
    (kernels/quant_query.py) instead of quantize's four."""
    if _use_triton(q) and isinstance(q_scale, torch.Tensor) and q.dim() == 3:
        from .quant_query import quantize_query_triton

        return quantize_query_triton(q, q_scale, dtype)
    return quantize(q, q_scale, dtype)


def _use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda


def write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    """Store k/v [T, Hkv, D] at flat slots (block * block_size + offset); slot < 0 = padding, skipped.

    On CUDA one Triton kernel skips padding slots itself (no device-to-host sync: kernels/kv_write.py);
    elsewhere PyTorch indexing, which drops the padding rows first."""
    slots = slot_mapping.to(device=k.device, dtype=torch.long)
    if _use_triton(k):
        from .kv_write import write_kv_triton

        return write_kv_triton(k, v, k_cache, v_cache, slots, k_scale, v_scale)
    keep = slots >= 0
    if not bool(keep.all()):
        slots, k, v = slots[keep], k[keep], v[keep]
    for x, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        flat = cache.view(-1, cache.shape[2], cache.shape[3])
        if is_fp8(cache.dtype):
            # index_put is not implemented for float8 on every device: write the bytes.
            flat.view(torch.uint8)[slots] = quantize(x, scale, cache.dtype).view(torch.uint8)
        else:
            flat[slots] = x.to(cache.dtype)
