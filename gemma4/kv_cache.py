"""Paged KV cache tensors: one cache per KV-cache group (sliding vs full attention).

Each group has its own kv block size (from its `GroupSelection`); its block allocator, block
tables and sliding-window trimming are gemma4/block_manager.py's. Per KV-producing layer it holds `k`/`v` tensors [num_blocks, kv_block_size, Hkv, D]
(FlashAttention's paged NHD layout) in the model dtype or FP8 (e4m3 / e5m2) with per-layer
K/V scales (dequant = stored * scale): `unit` (1.0) or `calibrated` (amax / fp8_max from a
calibration prefill). KV-shared layers own no cache: they read their producer's tensors and scales.

Sliding-window groups keep only the blocks a window can still read (the block manager gives the
rest back; a kernel that reads a few keys before the window, masked, reads the all-zero null
block). Such a group is sized for its peak,
W - 1 + the longest step per sequence (`step_tokens`: the prefill chunk), when that is below the
full length.
"""

from __future__ import annotations

import torch

from ..backends.base import LayerParams
from .block_manager import BlockManager, GroupBlocks, group_blocks
from .config import FULL, SLIDING, Gemma4Args
from ..kernels.cache_ops import quantize, write_kv
from ..kernels.dtypes import is_fp8, kv_torch_dtype  # noqa: F401 - re-exported
from ..selector.config.vocab import KIND_OF_LAYER_TYPE, LAYER_TYPE

GROUP_TO_LAYER_TYPE = LAYER_TYPE  # selector group kind -> HF layer type (the selector's vocabulary)
LAYER_TYPE_TO_GROUP = KIND_OF_LAYER_TYPE


def scales_from_amax(amax: dict[int, tuple[float, float]], fp8: torch.dtype) -> dict[int, tuple[float, float]]:
    """Calibrated per-layer scales: amax / fp8_max (so amax maps to the largest FP8 value)."""
    fmax = torch.finfo(fp8).max
    tiny = 1e-12
    return {i: (max(float(k), tiny) / fmax, max(float(v), tiny) / fmax) for i, (k, v) in amax.items()}


class GroupCache(GroupBlocks):
    """The paged cache of one group: tensors per producer layer on top of its block bookkeeping."""

    def __init__(self, args: Gemma4Args, group, num_blocks: int, device, model_dtype: torch.dtype,
                 window: int | None = None):
        super().__init__(group.kind, group.kv_block_size, num_blocks, window)
        self.group = group
        self.kind = GROUP_TO_LAYER_TYPE[group.kind]
        self.dtype = kv_torch_dtype(group.kv_cache_dtype, model_dtype)
        self.model_dtype = model_dtype
        self.fp8 = is_fp8(self.dtype)
        layers = args.layers_of(self.kind)
        self.producers = [i for i in layers if not args.is_kv_shared(i)]
        self.head_dim = args.layer_head_dim(layers[0])
        self.num_kv_heads = args.num_kv_heads(layers[0])
        if group.head_size != self.head_dim or group.num_kv_heads != self.num_kv_heads:
            raise ValueError(
                f"{group.kind} group selection has head_size={group.head_size}, num_kv_heads="
                f"{group.num_kv_heads} but the model's {self.kind} layers have {self.head_dim}/{self.num_kv_heads}"
            )
        self.device = torch.device(device)
        shape = (num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        self.k = {i: torch.zeros(shape, dtype=self.dtype, device=self.device) for i in self.producers}
        self.v = {i: torch.zeros(shape, dtype=self.dtype, device=self.device) for i in self.producers}
        one = lambda: torch.ones((), dtype=torch.float32, device=self.device)  # noqa: E731
        self.k_scale = {i: one() for i in self.producers}
        self.v_scale = {i: one() for i in self.producers}
        self._params: dict[tuple[int, int], LayerParams] = {}

    # -------------------------------------------------------------- tensors
    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
              static: bool = False) -> None:
        if static and not k.is_cuda:  # the graph-safe path emulated on CPU: no host syncs, so no padding slots
            for x, cache, scale in ((k, self.k[layer], self.k_scale[layer]), (v, self.v[layer], self.v_scale[layer])):
                flat = cache.view(-1, cache.shape[2], cache.shape[3])
                if self.fp8:
                    flat.view(torch.uint8).index_copy_(0, slot_mapping, quantize(x, scale, self.dtype).view(torch.uint8))
                else:
                    flat.index_copy_(0, slot_mapping, x.to(self.dtype))
            return
        # CUDA (captured or not): one Triton kernel, padding slots skipped in the kernel, no host sync
        if self.fp8:
            write_kv(k, v, self.k[layer], self.v[layer], slot_mapping, self.k_scale[layer], self.v_scale[layer])
        else:
            write_kv(k, v, self.k[layer], self.v[layer], slot_mapping)

    def kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[layer], self.v[layer]

    def layer_params(self, layer: int, window_left: int) -> LayerParams:
        key = (layer, window_left)
        p = self._params.get(key)
        if p is None:
            p = LayerParams(softmax_scale=1.0, window_left=window_left, out_dtype=self.model_dtype)
            if self.fp8:
                p.k_scale, p.v_scale = self.k_scale[layer], self.v_scale[layer]
            self._params[key] = p
        return p

    def set_scales(self, scales: dict[int, tuple[float, float]]) -> None:
        """Set per-layer FP8 scales in place (the tensors keep their identity for CUDA graphs)."""
        for i in self.producers:
            if i in scales:
                ks, vs = scales[i]
                self.k_scale[i].fill_(float(ks))
                self.v_scale[i].fill_(float(vs))


class PagedKVCache(BlockManager):
    """All groups' caches for one model. `selection_groups`: layer type -> GroupSelection.

    max_tokens: tokens over all sequences; step_tokens: the most tokens one sequence adds in one
    step (None: a whole sequence), which bounds what a sliding-window group holds per sequence."""

    def __init__(self, args: Gemma4Args, groups: dict, *, max_tokens: int, device, model_dtype: torch.dtype,
                 max_seqs: int = 1, step_tokens: int | None = None):
        self.args = args
        self.groups: dict[str, GroupCache] = {}
        for kind in sorted(set(args.layer_types)):
            if kind not in groups:
                raise KeyError(f"the selection has no {LAYER_TYPE_TO_GROUP[kind]} group for this model")
            g = groups[kind]
            window = args.sliding_window if kind == SLIDING else None
            nb = group_blocks(g.kv_block_size, max_tokens, max_seqs, window, step_tokens)
            self.groups[kind] = GroupCache(args, g, nb, device, model_dtype, window=window)

    @property
    def fp8(self) -> bool:
        return any(g.fp8 for g in self.groups.values())

    def set_scales(self, scales: dict[int, tuple[float, float]]) -> None:
        for g in self.groups.values():
            g.set_scales(scales)

    def scales(self) -> dict[int, tuple[float, float]]:
        out = {}
        for g in self.groups.values():
            for i in g.producers:
                out[i] = (float(g.k_scale[i]), float(g.v_scale[i]))
        return out

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for g in self.groups.values() for d in (g.k, g.v) for t in d.values())
