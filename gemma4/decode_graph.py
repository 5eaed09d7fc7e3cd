"""One Gemma-4 decode step (a fixed batch of sequences, one token each) captured as a CUDA graph.

The engine (gemma4/engine.py) owns when to capture, replay or advance; this holds the static
buffers the graph reads (token ids, positions, per-group metadata and slots) and refills them.
Block tables are copied from the host on every capture/replay, so a table the cache rewrote
(new blocks, sliding blocks given back) reaches the kernels; `advance` only bumps positions and
lengths on the device.
"""

from __future__ import annotations

import torch

from kselect.backends.base import AttentionMetadata


class DecodeGraph:
    """One decode step (batch of fixed sequences, one token each) captured as a CUDA graph."""

    def __init__(self, eng, seqs: list[int]):
        self.eng, self.seqs = eng, list(seqs)
        dev, b = eng.device, len(seqs)
        self.ids = torch.zeros(b, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.width = {k: gc.blocks_needed(eng.max_seq_len) for k, gc in eng.cache.groups.items()}
        metas, slots = eng._metadata(seqs, [1] * b, [1] * b, None)
        self.metas, self.slots = {}, {}
        for k, m in metas.items():
            self.metas[k] = AttentionMetadata(
                cu_seqlens_q=m.cu_seqlens_q.clone(), seqused_k=torch.ones(b, dtype=torch.int32, device=dev),
                block_table=torch.zeros(b, self.width[k], dtype=torch.int32, device=dev),
                max_seqlen_q=1, max_seqlen_k=eng.max_seq_len)
            self.slots[k] = torch.zeros(b, dtype=torch.long, device=dev)
        self.graph = None
        self.out = None
        self.state = None  # (engine epoch, positions the device buffers hold for the next step)
        self.table_lens: dict[str, list[int]] = {}
        self.table_version = -1  # the cache's table version the static block tables hold
        self.host_used: list[int] = []  # the static buffers' values on the host (see _prepare)
        self.host_tables: dict[str, torch.Tensor] = {}

    def _set_ids(self, tokens):
        if isinstance(tokens, torch.Tensor):
            self.ids.copy_(tokens)
        else:
            self.ids.copy_(torch.tensor(tokens, dtype=torch.long), non_blocking=True)

    def _fill(self, tokens, starts):
        eng = self.eng
        self._set_ids(tokens)
        self.pos.copy_(torch.tensor(starts, dtype=torch.long), non_blocking=True)
        self.host_used = [p + 1 for p in starts]
        used = torch.tensor(self.host_used, dtype=torch.int32)
        for k, gc in eng.cache.groups.items():
            self.host_tables[k] = gc.block_table(self.seqs, self.width[k])
            self.metas[k].seqused_k.copy_(used)
            self.metas[k].block_table.copy_(self.host_tables[k])
            self.slots[k].copy_(gc.slot_mapping(self.seqs, starts, [1] * len(starts)))
            self.table_lens[k] = [len(gc.tables.get(s, ())) for s in self.seqs]
        self.table_version = eng.cache.version()
        self._prepare()

    def _prepare(self):
        """Backends that plan on the host (FLASHINFER) re-plan for the values now in the static buffers."""
        for k, be in self.eng.backends.items():
            be.prepare_replay(self.metas[k], self.host_used, self.host_tables[k])

    def _run(self):
        eng = self.eng
        for k, gc in eng.cache.groups.items():  # slots from positions + block tables, on the device
            bs = gc.block_size
            blk = self.metas[k].block_table.gather(1, torch.div(self.pos, bs, rounding_mode="floor")[:, None])
            self.slots[k].copy_(blk.squeeze(1).long() * bs + self.pos % bs)
        ctx = eng._context(self.pos, self.metas, self.slots)
        ctx.extra["static"] = True
        return eng.model.compute_logits(eng.model(self.ids, ctx))

    def capture(self, tokens, starts) -> tuple[torch.Tensor, torch.Tensor]:
        """Warm up, capture, replay once: (the eager step's logits, the replay's)."""
        self._fill(tokens, starts)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up; rewrites the same K/V slots with the same values
                eager = self._run()
        torch.cuda.current_stream().wait_stream(s)
        eager = eager.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._run()
        return eager, self.replay(tokens, starts)  # the engine checks that they agree

    def replay(self, tokens, starts) -> torch.Tensor:
        self._fill(tokens, starts)
        self.graph.replay()
        return self.out

    def advance(self, tokens) -> torch.Tensor:
        """The next step of the same sequences: positions and lengths +1 on the device."""
        self._set_ids(tokens)
        self.pos.add_(1)
        for m in self.metas.values():
            m.seqused_k.add_(1)
        self.host_used = [u + 1 for u in self.host_used]
        self._prepare()
        self.graph.replay()
        return self.out
