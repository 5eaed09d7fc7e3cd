"""Paged-cache bookkeeping: which cache blocks each sequence owns, per KV-cache group.

No tensors here (they live in gemma4/kv_cache.py, which extends these classes): a free list per
group, each sequence's block table, and the sliding-window trimming. A windowed group gives back
every block wholly before `start - (W - 1)` before a step whose first query sits at `start`; its
table entry then points at a reserved, never-written null block, so tables stay positional.
"""

from __future__ import annotations

import math

import torch


class CacheFullError(RuntimeError):
    pass


class GroupBlocks:
    """One group's block allocator and block tables. `window`: W tokens (a query at p reads keys
    p-W+1 .. p) or None (keep every block)."""

    def __init__(self, name: str, block_size: int, num_blocks: int, window: int | None = None):
        self.name = name  # for messages (the group's kind)
        self.block_size = int(block_size)
        self.num_blocks = num_blocks
        self.window = window
        self.null_block = 0 if window else None  # never handed out, never written: stays zero
        self.free_blocks = list(range(num_blocks - 1, 0 if window else -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.trimmed: dict[int, int] = {}  # per sequence: leading table entries given back (null)
        self.version = 0  # bumped whenever trim() rewrites table entries (CUDA graphs reload tables)
        self.peak_in_use = 0  # the most blocks held at once (the run's summary shows the pool was big enough)

    def blocks_needed(self, num_tokens: int) -> int:
        return math.ceil(num_tokens / self.block_size)

    def ensure(self, seq: int, num_tokens: int) -> None:
        table = self.tables.setdefault(seq, [])
        need = self.blocks_needed(num_tokens) - len(table)
        if need > len(self.free_blocks):
            raise CacheFullError(
                f"{self.name} KV cache is full: sequence {seq} needs {need} more blocks of "
                f"{self.block_size} tokens, {len(self.free_blocks)} free of {self.num_blocks}"
            )
        for _ in range(need):
            table.append(self.free_blocks.pop())
        self.peak_in_use = max(self.peak_in_use, self.blocks_in_use())

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


class BlockManager:
    """The block bookkeeping of every group of one model (`groups`: layer type -> GroupBlocks)."""

    groups: dict[str, GroupBlocks]

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
