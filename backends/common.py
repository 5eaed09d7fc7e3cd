"""Helpers shared by the backend adapters: kernel-block views and FP8 descale plumbing."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .params import LayerParams
from ..kernels.cache_ops import quantize_query
from ..kernels.reference import is_fp8


def kernel_block_table(block_table: torch.Tensor, kv_block_size: int, kernel_block_size: int) -> torch.Tensor:
    """A block table in kv blocks -> the same table in kernel blocks (kv block b = kernel blocks
    b*r .. b*r + r-1, r = kv_block_size // kernel_block_size); -1 entries stay -1."""
    if kernel_block_size in (0, kv_block_size):
        return block_table
    if kv_block_size % kernel_block_size:
        raise ValueError(f"kv block size {kv_block_size} is not a multiple of kernel block size {kernel_block_size}")
    r = kv_block_size // kernel_block_size
    sub = torch.arange(r, device=block_table.device, dtype=block_table.dtype)
    bt = (block_table[:, :, None] * r + sub).flatten(1)
    bt = torch.where(block_table.repeat_interleave(r, 1) < 0, torch.full_like(bt, -1), bt)
    return bt.contiguous()


def kernel_block_view(k_cache, v_cache, meta, kernel_block_size: int):
    """View each kv block as kv_block_size // kernel_block_size kernel blocks.

    Kv block b becomes kernel blocks b*r .. b*r + r-1 (contiguous in memory, so a pure view),
    and each block-table entry expands to those r entries in order. The expanded table is kept on
    `meta` for the step's other layers (AttentionMetadata.kernel_tables).
    """
    nb, bs, hkv, d = k_cache.shape
    if kernel_block_size in (0, bs):
        return k_cache, v_cache, meta.block_table
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    stamp = (meta.block_table.data_ptr(), capturing)  # inference tensors keep no version counter
    hit = meta.kernel_tables.get((bs, kernel_block_size))
    if hit is None or hit[0] != stamp:
        hit = meta.kernel_tables[(bs, kernel_block_size)] = (
            stamp, kernel_block_table(meta.block_table, bs, kernel_block_size))
    r = bs // kernel_block_size
    kc = k_cache.view(nb * r, kernel_block_size, hkv, d)
    vc = v_cache.view(nb * r, kernel_block_size, hkv, v_cache.shape[3])
    return kc, vc, hit[1]


@dataclass
class QuantInputs:
    q: torch.Tensor  # model dtype, or fp8 on the quant-query path
    q_descale: torch.Tensor | None
    k_descale: torch.Tensor | None
    v_descale: torch.Tensor | None
    out_dtype: torch.dtype  # the model dtype: the attention output's


_UNIT: dict[torch.device, torch.Tensor] = {}


def unit_scale(device) -> torch.Tensor:
    """A shared fp32 1.0 per device (made outside graph capture: a capture-time tensor holds no value yet)."""
    device = torch.device(device)
    one = _UNIT.get(device)
    if one is None:
        one = torch.ones((), dtype=torch.float32, device=device)
        if not _capturing(device):
            _UNIT[device] = one
    return one


def _capturing(device) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


def query_scale(descale_mode: str, kv_dtype: torch.dtype, layer: LayerParams, device) -> torch.Tensor | None:
    """The scale q is quantized with on the quant-query path (q_fp8 = q / scale), else None."""
    if descale_mode != "q_k_v" or not is_fp8(kv_dtype):
        return None
    return layer.q_scale if layer.q_scale is not None else unit_scale(device)


def quant_inputs(descale_mode: str, q, k_cache, layer: LayerParams) -> QuantInputs:
    """Apply the group's descale mode: q_k_v quantizes q with layer.q_scale (unless the model's q/k/v
    kernel already did, with the same query_scale); fp8 caches get k/v descales."""
    pre = is_fp8(q.dtype)
    if pre and (layer.out_dtype is None or query_scale(descale_mode, k_cache.dtype, layer, q.device) is None
                or q.dtype != k_cache.dtype):
        raise ValueError(f"q arrived quantized ({q.dtype}) but this group's descale mode is {descale_mode!r} on a "
                         f"{k_cache.dtype} cache (out dtype {layer.out_dtype}): only the quant-query path (q_k_v, "
                         "q in the cache's FP8 dtype, LayerParams.out_dtype set) takes a quantized q")
    out = layer.out_dtype or q.dtype
    if not is_fp8(k_cache.dtype):
        return QuantInputs(q, None, None, None, out)
    dev = q.device
    ks = layer.k_scale if layer.k_scale is not None else unit_scale(dev)
    vs = layer.v_scale if layer.v_scale is not None else unit_scale(dev)
    qs = query_scale(descale_mode, k_cache.dtype, layer, dev)
    if qs is not None:
        return QuantInputs(q if pre else quantize_query(q, qs, k_cache.dtype), qs, ks, vs, out)
    return QuantInputs(q, None, ks, vs, out)


_EXPANDED: dict[tuple, tuple[torch.Tensor, int, torch.Tensor]] = {}


def expand_descale(d: torch.Tensor | None, batch: int, hkv: int) -> torch.Tensor | None:
    """Scalar or [B, Hkv] -> contiguous fp32 [B, Hkv] (what FA3/FA4 and our Triton kernel take).

    Memoized per scale tensor (while its version is unchanged) and shape: descales are per-layer
    constants, and expanding them on every call put three copy kernels into every FP8 layer call of a
    decode step. A capture-time result is not memoized (it holds no value until the graph replays)."""
    if d is None:
        return None
    key = (id(d), batch, hkv)
    version = _version(d)
    hit = _EXPANDED.get(key)
    if hit is not None and hit[0] is d and hit[1] == version:
        return hit[2]
    e = d.to(torch.float32)
    e = e.reshape(1, 1).expand(batch, hkv).contiguous() if e.numel() == 1 else e.reshape(batch, hkv).contiguous()
    if not _capturing(d.device):
        if len(_EXPANDED) > 4096:
            _EXPANDED.clear()
        _EXPANDED[key] = (d, version, e)  # holds d: its id is not reused while memoized
    return e


def _version(d: torch.Tensor) -> int:
    """d's in-place version; an inference-mode tensor (weights and scales loaded under torch.inference_mode)
    has no version counter and can only change in place inside inference mode: taken as a constant."""
    return -1 if d.is_inference() else d._version
