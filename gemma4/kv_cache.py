"""Paged KV cache: one cache per KV-cache group (sliding vs full attention).

Each group has its own kv block size (from its `GroupSelection`), block allocator and block
tables; per KV-producing layer it holds `k`/`v` tensors [num_blocks, kv_block_size, Hkv, D]
(FlashAttention's paged NHD layout) in the model dtype or FP8 (e4m3 / e5m2) with per-layer
K/V scales (dequant = stored * scale): `unit` (1.0) or `calibrated` (amax / fp8_max from a
calibration prefill). KV-shared layers own no cache: they read their producer's tensors and scales.

Sliding-window groups keep only the blocks a window can still read: before a step whose first
query sits at position `start`, every block wholly before `start - (W - 1)` goes back to the pool
and its table entry points at a reserved, all-zero null block (tables stay positional; a kernel
that reads a few keys before the window, masked, reads zeros). Such a group is sized for its peak,
W - 1 + the longest step per sequence (`step_tokens`: the prefill chunk), when that is below the
full length.
"""

from __future__ import annotations

import math

import torch

from kselect.backends.base import LayerParams
from kselect.gemma4.config import FULL, SLIDING, Gemma4Args
from kselect.kernels.cache_ops import quantize, write_kv

GROUP_TO_LAYER_TYPE = {"sliding_window": SLIDING, "full_attention": FULL}
LAYER_TYPE_TO_GROUP = {v: k for k, v in GROUP_TO_LAYER_TYPE.items()}

FP8_KV = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
PLAIN_KV = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def kv_torch_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    if name in (None, "auto"):
        return model_dtype
    if name in FP8_KV:
        return FP8_KV[name]
    if name in PLAIN_KV:
        return PLAIN_KV[name]
    raise ValueError(f"unsupported kv cache dtype {name!r} (expected one of {sorted({**FP8_KV, **PLAIN_KV})})")


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


def scales_from_amax(amax: dict[int, tuple[float, float]], fp8: torch.dtype) -> dict[int, tuple[float, float]]:
    """Calibrated per-layer scales: amax / fp8_max (so amax maps to the largest FP8 value)."""
    fmax = torch.finfo(fp8).max
    tiny = 1e-12
    return {i: (max(float(k), tiny) / fmax, max(float(v), tiny) / fmax) for i, (k, v) in amax.items()}


class CacheFullError(RuntimeError):
    pass


class GroupCache:
    """The paged cache of one group: tensors per producer layer, a block allocator, block tables."""

    def __init__(self, args: Gemma4Args, group, num_blocks: int, device, model_dtype: torch.dtype,
                 window: int | None = None):
        self.group = group
        self.window = window  # W tokens (a query at p reads keys p-W+1 .. p); None = keep every block
        self.kind = GROUP_TO_LAYER_TYPE[group.kind]
        self.block_size = int(group.kv_block_size)
        self.dtype = kv_torch_dtype(group.kv_cache_dtype, model_dtype)
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
        self.num_blocks = num_blocks
        self.device = torch.device(device)
        shape = (num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        self.k = {i: torch.zeros(shape, dtype=self.dtype, device=self.device) for i in self.producers}
        self.v = {i: torch.zeros(shape, dtype=self.dtype, device=self.device) for i in self.producers}
        one = lambda: torch.ones((), dtype=torch.float32, device=self.device)  # noqa: E731
        self.k_scale = {i: one() for i in self.producers}
        self.v_scale = {i: one() for i in self.producers}
        self._params: dict[tuple[int, int], LayerParams] = {}
        self.null_block = 0 if window else None  # never handed out, never written: stays zero
        self.free_blocks = list(range(num_blocks - 1, 0 if window else -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.trimmed: dict[int, int] = {}  # per sequence: leading table entries given back (null)
        self.version = 0  # bumped whenever trim() rewrites table entries (CUDA graphs reload tables)

    # -------------------------------------------------------------- tensors
    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
              static: bool = False) -> None:
        if static:  # CUDA-graph capture: no host syncs, no padding slots
            for x, cache, scale in ((k, self.k[layer], self.k_scale[layer]), (v, self.v[layer], self.v_scale[layer])):
                flat = cache.view(-1, cache.shape[2], cache.shape[3])
                if self.fp8:
                    flat.view(torch.uint8).index_copy_(0, slot_mapping, quantize(x, scale, self.dtype).view(torch.uint8))
                else:
                    flat.index_copy_(0, slot_mapping, x.to(self.dtype))
            return
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
            p = LayerParams(softmax_scale=1.0, window_left=window_left)
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

    # -------------------------------------------------------------- blocks
    def blocks_needed(self, num_tokens: int) -> int:
        return math.ceil(num_tokens / self.block_size)

    def ensure(self, seq: int, num_tokens: int) -> None:
        table = self.tables.setdefault(seq, [])
        need = self.blocks_needed(num_tokens) - len(table)
        if need > len(self.free_blocks):
            raise CacheFullError(
                f"{self.group.kind} KV cache is full: sequence {seq} needs {need} more blocks of "
                f"{self.block_size} tokens, {len(self.free_blocks)} free of {self.num_blocks}"
            )
        for _ in range(need):
            table.append(self.free_blocks.pop())

    def release(self, seq: int) -> None:
        self.free_blocks.extend(b for b in reversed(self.tables.pop(seq, [])) if b != self.null_block)
        self.trimmed.pop(seq, None)

    def trim(self, seq: int, start: int) -> None:
        """Before a step whose queries begin at `start`: give back the blocks no window can reach again."""
        if not self.window or seq not in self.tables:
            return
        table = self.tables[seq]
        dead = min(max(0, start - (self.window - 1)) // self.block_size, len(table))
        done = self.trimmed.get(seq, 0)
        if dead <= done:
            return
        for i in range(done, dead):
            self.free_blocks.append(table[i])
            table[i] = self.null_block
        self.trimmed[seq] = dead
        self.version += 1

    def kept_from(self, seq: int) -> int:
        """First position whose keys are still cached (0 unless trimmed)."""
        return self.trimmed.get(seq, 0) * self.block_size

    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free_blocks) - (self.null_block is not None)

    def block_table(self, seqs: list[int], width: int | None = None) -> torch.Tensor:
        width = width or max(1, max(len(self.tables.get(s, [])) for s in seqs))
        bt = torch.zeros(len(seqs), width, dtype=torch.int32)
        for r, s in enumerate(seqs):
            t = self.tables.get(s, [])
            bt[r, : len(t)] = torch.tensor(t, dtype=torch.int32)
        return bt

    def slot_mapping(self, seqs: list[int], starts: list[int], counts: list[int]) -> torch.Tensor:
        """Flat slots (block * block_size + offset) for tokens starts[i] .. starts[i]+counts[i]-1 of seqs[i]."""
        out = []
        for s, p0, n in zip(seqs, starts, counts):
            t = torch.tensor(self.tables[s], dtype=torch.int64)
            pos = torch.arange(p0, p0 + n, dtype=torch.int64)
            out.append(t[pos // self.block_size] * self.block_size + pos % self.block_size)
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


def group_blocks(block_size: int, max_tokens: int, max_seqs: int, window: int | None = None,
                 step_tokens: int | None = None) -> int:
    """Blocks a group's pool needs: every token (each sequence may waste one partly filled block),
    or for a window of W tokens at most the blocks over [start - (W-1), start + step) per sequence,
    plus the null block."""
    nb = math.ceil(max_tokens / block_size) + max_seqs
    if not window:
        return nb
    peak = math.ceil((window - 1 + (step_tokens or max_tokens)) / block_size) + 1
    return min(nb, max_seqs * peak) + 1


class PagedKVCache:
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

    def step(self, seq: int, start: int, end: int) -> None:
        """Blocks for a step writing positions [start, end): trim windowed groups, then allocate."""
        for g in self.groups.values():
            g.trim(seq, start)
            g.ensure(seq, end)

    def reserve(self, seq: int, num_tokens: int) -> None:
        """Allocate up front (static tables for CUDA graphs), except in windowed groups, which
        allocate as they go so that trimmed blocks are reused."""
        for g in self.groups.values():
            if not g.window:
                g.ensure(seq, num_tokens)

    def can_resume_at(self, seq: int, pos: int) -> bool:
        """Whether a step starting at `pos` still finds every key its windows reach (not trimmed)."""
        return all(not g.window or g.kept_from(seq) <= max(0, pos - (g.window - 1)) for g in self.groups.values())

    def version(self) -> int:
        return sum(g.version for g in self.groups.values())

    @property
    def fp8(self) -> bool:
        return any(g.fp8 for g in self.groups.values())

    def ensure(self, seq: int, num_tokens: int) -> None:
        for g in self.groups.values():
            g.ensure(seq, num_tokens)

    def release(self, seq: int) -> None:
        for g in self.groups.values():
            g.release(seq)

    def release_all(self) -> None:
        for g in self.groups.values():
            for s in list(g.tables):
                g.release(s)

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
