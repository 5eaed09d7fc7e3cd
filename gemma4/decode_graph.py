"""One Gemma-4 decode step (a fixed batch of sequences, one token each) captured as a CUDA graph.

The engine (gemma4/engine.py) owns when to capture, replay or advance; this holds the static
buffers the graph reads (token ids, positions, per-group metadata and slots) and refills them
through the model runner's public interface (gemma4/model_runner.py). Block tables are copied from
the host on every capture/replay, so a table the cache rewrote (new blocks, sliding blocks given
back) reaches the kernels; `advance` only bumps positions and lengths on the device.
"""

from __future__ import annotations

import torch

from ..backends.base import AttentionMetadata
from .cuda_graph import CapturedStep
from .model_runner import ModelRunner


def static_metadata(runner: ModelRunner, b: int, q: int, max_seq_len: int):
    """Static per-group metadata buffers for b sequences of q tokens each (tables max_seq_len wide)."""
    dev = runner.device
    metas, slots, width = {}, {}, {}
    for k, gc in runner.cache.groups.items():
        width[k] = gc.blocks_needed(max_seq_len)
        metas[k] = AttentionMetadata(
            cu_seqlens_q=torch.arange(0, b * q + 1, q, dtype=torch.int32, device=dev),
            seqused_k=torch.full((b,), q, dtype=torch.int32, device=dev),
            block_table=torch.zeros(b, width[k], dtype=torch.int32, device=dev),
            max_seqlen_q=q, max_seqlen_k=max_seq_len)
        slots[k] = torch.zeros(b * q, dtype=torch.long, device=dev)
    return metas, slots, width


class DecodeGraph(CapturedStep):
    """One decode step (batch of fixed sequences, one token each) captured as a CUDA graph."""

    def __init__(self, runner: ModelRunner, seqs: list[int], max_seq_len: int):
        self.runner, self.seqs = runner, list(seqs)
        dev, b = runner.device, len(seqs)
        self.ids = torch.zeros(b, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.metas, self.slots, self.width = static_metadata(runner, b, 1, max_seq_len)
        self.state = None  # (engine epoch, positions the device buffers hold for the next step)
        self.table_lens: dict[str, list[int]] = {}
        self.table_version = -1  # the cache's table version the static block tables hold
        self.host_used: list[int] = []  # the static buffers' values on the host (see prepare_replay)
        self.host_tables: dict[str, torch.Tensor] = {}

    def _set_ids(self, tokens):
        if isinstance(tokens, torch.Tensor):
            self.ids.copy_(tokens)
        else:
            self.ids.copy_(torch.tensor(tokens, dtype=torch.long), non_blocking=True)

    def _fill(self, tokens, starts):
        cache = self.runner.cache
        self._set_ids(tokens)
        self.pos.copy_(torch.tensor(starts, dtype=torch.long), non_blocking=True)
        self.host_used = [p + 1 for p in starts]
        used = torch.tensor(self.host_used, dtype=torch.int32)
        for k, gc in cache.groups.items():
            self.host_tables[k] = gc.block_table(self.seqs, self.width[k])
            self.metas[k].seqused_k.copy_(used)
            self.metas[k].block_table.copy_(self.host_tables[k])
            self.table_lens[k] = [len(gc.tables.get(s, ())) for s in self.seqs]
        self.table_version = cache.version()
        self.runner.prepare_replay(self.metas, self.host_used, self.host_tables)

    def _run(self):
        logits = self.runner.logits(self.runner.static_forward(self.ids, self.pos, self.metas, self.slots))
        # the next step's positions and lengths, inside the graph: `advance` launches nothing but the ids' copy
        self.pos.add_(1)
        for m in self.metas.values():
            m.seqused_k.add_(1)
        return logits

    def _rewind(self):
        self.pos.sub_(1)
        for m in self.metas.values():
            m.seqused_k.sub_(1)

    def tables_changed(self) -> bool:
        cache = self.runner.cache
        return self.table_version != cache.version() or any(
            len(gc.tables.get(s, ())) != self.table_lens[k][r] for k, gc in cache.groups.items()
            for r, s in enumerate(self.seqs))

    def capture_step(self, tokens, starts) -> tuple[torch.Tensor, torch.Tensor]:
        """Fill, warm up, capture, replay once: (the eager step's logits, the replay's)."""
        self._fill(tokens, starts)
        eager = self.capture()
        return eager, self.replay_step(tokens, starts)  # the engine checks that they agree

    def replay_step(self, tokens, starts) -> torch.Tensor:
        self._fill(tokens, starts)
        return self.replay()

    def advance(self, tokens) -> torch.Tensor:
        """The next step of the same sequences: the last replay left positions and lengths +1 on the device."""
        self._set_ids(tokens)
        self.host_used = [u + 1 for u in self.host_used]
        self.runner.prepare_replay(self.metas, self.host_used, self.host_tables)
        return self.replay()
