"""Speculative decoding rounds as CUDA graphs: the k draft steps and the verify pass, captured.

`DraftGraph`: k greedy draft steps of the MTP drafter for b sequences, all at their constant draft
position, over the target's cache (gemma4/draft_kv.py `DraftKVBinding`); each step's argmax and
next hidden state feed the next step on the device. `VerifyGraph`: one target forward over
[last, d1..dk] per sequence (b x (k+1) tokens, the model runner's capture-safe step) and the
target's argmax at each position. `SpecGraphs.round` runs both for one round: between them the
engine gives the verify pass its blocks (`Engine.begin_step`, as an eager pass), and after it the
host reads the accepted counts once. Graphs are kept per batch size; static inputs are refilled
from the host every round (block tables change as sliding-window blocks are given back).

A capture is checked against the eager warm-up run (same draft tokens, same target tokens, hidden
states within 1e-3); any failure turns the graphs off for this decoder with a note, and rounds run
eagerly from then on.
"""

from __future__ import annotations

import math

import torch

from ..backends.base import AttentionMetadata
from .cuda_graph import CapturedStep
from .decode_graph import static_metadata
from .drafter import draft_inputs
from .sampling import max_rel_error


class DraftGraph(CapturedStep):
    def __init__(self, sd, b: int, k: int):
        eng = sd.engine
        self.sd, self.b, self.k = sd, b, k
        dev, target = eng.device, eng.model
        self.last = torch.zeros(b, dtype=torch.long, device=dev)
        self.hidden = torch.zeros(b, target.args.hidden_size, dtype=target.dtype, device=dev)
        self.pos = torch.zeros(b, dtype=torch.long, device=dev)
        self.width, self.metas = {}, {}
        for kind in sd.binding.kinds:
            gc = eng.cache.groups[kind]
            self.width[kind] = gc.blocks_needed(eng.max_seq_len)
            self.metas[kind] = AttentionMetadata(
                cu_seqlens_q=torch.arange(b + 1, dtype=torch.int32, device=dev),
                seqused_k=torch.ones(b, dtype=torch.int32, device=dev),
                block_table=torch.zeros(b, self.width[kind], dtype=torch.int32, device=dev),
                max_seqlen_q=1, max_seqlen_k=eng.max_seq_len)
        self.ctx = sd.binding.static_context(self.pos, self.metas)

    def fill(self, seqs: list[int], last: list[int], hidden: torch.Tensor, positions: list[int],
             written: list[int]) -> None:
        eng, binding = self.sd.engine, self.sd.binding
        self.last.copy_(torch.tensor(last, dtype=torch.long), non_blocking=True)
        self.hidden.copy_(hidden)
        self.pos.copy_(torch.tensor(positions, dtype=torch.long), non_blocking=True)
        for kind in binding.kinds:
            used = binding.used(kind, positions, written)
            table = eng.cache.groups[kind].block_table(seqs, self.width[kind])
            self.metas[kind].seqused_k.copy_(torch.tensor(used, dtype=torch.int32))
            self.metas[kind].block_table.copy_(table)
            binding.backends[kind].prepare_replay(self.metas[kind], used, table)

    def _run(self):
        sd = self.sd
        cur, h = self.last, self.hidden
        drafts = []
        for _ in range(self.k):
            logits, h_next = sd.drafter(draft_inputs(sd.target, cur, h), self.ctx)
            cur = logits.argmax(-1)
            h = h_next.to(self.hidden.dtype)
            drafts.append(cur)
        return torch.stack(drafts, 1)  # [b, k]


class VerifyGraph(CapturedStep):
    def __init__(self, eng, b: int, k: int):
        self.eng, self.b, self.q = eng, b, k + 1
        dev = eng.device
        self.ids = torch.zeros(b, self.q, dtype=torch.long, device=dev)
        self.pos = torch.zeros(b * self.q, dtype=torch.long, device=dev)
        self.metas, self.slots, self.width = static_metadata(eng.runner, b, self.q, eng.max_seq_len)
        self.offsets = torch.arange(self.q, dtype=torch.long)

    def fill(self, seqs: list[int], starts: list[int], last: torch.Tensor, drafts: torch.Tensor) -> None:
        self.ids[:, 0].copy_(last)
        self.ids[:, 1:].copy_(drafts)
        pos = (torch.tensor(starts, dtype=torch.long)[:, None] + self.offsets).reshape(-1)
        self.pos.copy_(pos, non_blocking=True)
        used = [p + self.q for p in starts]
        tables = {}
        for kind, gc in self.eng.cache.groups.items():
            tables[kind] = gc.block_table(seqs, self.width[kind])
            self.metas[kind].seqused_k.copy_(torch.tensor(used, dtype=torch.int32))
            self.metas[kind].block_table.copy_(tables[kind])
        self.eng.runner.prepare_replay(self.metas, used, tables)

    def _run(self):
        runner = self.eng.runner
        hidden = runner.static_forward(self.ids.view(-1), self.pos, self.metas, self.slots)
        return runner.logits(hidden).argmax(-1).view(self.b, self.q), hidden


class SpecGraphs:
    """The captured draft and verify steps of one SpeculativeDecoder, per batch size."""

    def __init__(self, sd):
        self.sd = sd
        self.failed = False
        self._graphs: dict[tuple[int, int], tuple[DraftGraph, VerifyGraph]] = {}

    @property
    def enabled(self) -> bool:
        return self.sd.engine.use_graphs and not self.failed

    def round(self, seqs: list[int], last: list[int], hidden: list[torch.Tensor], k: int):
        """One greedy round for `seqs` (each drafts k tokens). Returns (drafts per sequence, emitted
        tokens per sequence (accepted drafts + the target's next token), verify hidden states per
        sequence [k+1, H]) with the k+1 tokens written as pending, or None when graphs failed (the
        round was not run: nothing was written)."""
        try:
            return self._round(seqs, last, hidden, k)
        except Exception as e:  # capture problems must never change results: fall back
            self.failed = True
            self._graphs.clear()
            self.sd.engine.note_fallback("CUDA graph speculative decoding", e)
            return None

    def _round(self, seqs, last, hidden, k):
        eng = self.sd.engine
        b = len(seqs)
        positions = [eng.sequences.length(s) for s in seqs]
        written = [max(eng.sequences[s].written, p) for s, p in zip(seqs, positions)]
        h = torch.stack([x.reshape(-1) for x in hidden])
        pair = self._graphs.get((b, k))
        fresh = pair is None
        if fresh:
            pair = (DraftGraph(self.sd, b, k), VerifyGraph(eng, b, k))
        dg, vg = pair
        dg.fill(seqs, last, h, positions, written)
        if fresh:
            eager_drafts = dg.capture()
            drafts = dg.replay()
            if not torch.equal(drafts, eager_drafts):
                raise RuntimeError("draft graph replay differs from its eager run")
        else:
            drafts = dg.replay()
        batch = eng.begin_step(seqs, [k + 1] * b)  # the verify pass's blocks (trims windowed groups)
        try:
            vg.fill(seqs, batch.starts, dg.last, drafts)
            if fresh:
                eager_t, eager_h = vg.capture()
                tgt, vhid = vg.replay()
                err = max_rel_error(vhid, eager_h)
                if not torch.equal(tgt, eager_t) or not math.isfinite(err) or err > 1e-3:
                    raise RuntimeError(f"verify graph replay differs from its eager run (hidden rel err {err:.2e})")
                self._graphs[(b, k)] = pair
            else:
                tgt, vhid = vg.replay()
        finally:
            eng.end_step(batch, commit=False)
        n = (drafts == tgt[:, :k]).int().cumprod(1).sum(1)
        host = torch.cat([n[:, None], drafts, tgt], 1).tolist()  # the round's one wait for the device
        d = [row[1:1 + k] for row in host]
        emitted = [row[1:1 + row[0]] + [row[1 + k + row[0]]] for row in host]
        return d, emitted, list(vhid.view(b, k + 1, -1).clone().unbind(0))
