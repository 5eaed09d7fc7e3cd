"""Every step the engine captures as a CUDA graph, and when a captured graph serves a step.

Capturing (`CapturedStep`): a subclass owns static input buffers and `_run()`, the step's body, which reads
only those buffers and returns its outputs (a tensor or a tuple). `capture` warms up on a side stream
(allocations, kernel autotuning and host-side planning happen there, not under capture), captures, and keeps
the outputs; `replay` re-runs the captured kernels over whatever the buffers hold now. Every graph refills its
static buffers through the model runner's public interface (gemma4/model_runner.py); a capture is checked
against the eager run of the same step, and any failure turns that kind of graph off (a warning and a note):
results never change, the step runs eager.

Decode (`DecodeGraph`, `DecodeGraphs`): a fixed batch of sequences, one token each, per batch size. Block
tables are copied from the host on every capture/replay, so a table the cache rewrote (new blocks, sliding
blocks given back) reaches the kernels; `advance` only bumps positions and lengths on the device.

Prefill (`PrefillGraph`, `PrefillGraphs`): one sequence's multi-token step (a prompt, or a chunk of one) per
token bucket. Why: an eager prefill of a short prompt is host-bound on the H200's host. E4B's 512-token
prefill took 27 ms of wall time for 9 ms of kernels, and which backend's host path was slower moved between
runs (bench/results/h200/objective_at_run/README.md, "The prefill profile"). A replayed graph leaves the host
out, so the kernels the selector measured are what the step costs. A step of n new tokens runs padded to the
bucket T >= n, as if the sequence appended T tokens: the metadata say T queries over p0 + T keys. So every
launch (grids, FlashInfer's plan for a prompt at p0 = 0) depends on T alone. Real row j sits at position
p0 + j and, causally, sees exactly the keys it sees eagerly. The T - n pad rows write no K/V (slot -1,
skipped by the cache-write kernel). They read whatever their table entries hold (reserved blocks, or block 0
as table padding), and their outputs are dropped.

Speculative rounds (`DraftGraph`, `VerifyGraph`, `SpecGraphs`): the k greedy draft steps of the MTP drafter
for b sequences, all at their constant draft position, over the target's cache (gemma4/draft_kv.py
`DraftKVBinding`), each step's argmax and next hidden state feeding the next on the device; and one target
forward over [last, d1..dk] per sequence (b x (k+1) tokens, the model runner's capture-safe step) with the
target's argmax at each position. `SpecGraphs.round` runs both for one round: between them the engine gives
the verify pass its blocks (`Engine.begin_step`, as an eager pass), and after it the host reads the accepted
counts once. Graphs are kept per batch size; a capture is checked against the eager warm-up run (same draft
tokens, same target tokens, hidden states within 1e-3).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..backends.base import AttentionMetadata, ReplayShapeError
from .drafter import draft_inputs
from .model_runner import ModelRunner
from .sampling import max_rel_error


class CapturedStep:
    graph = None
    out = None

    def _run(self):  # pragma: no cover - subclasses
        raise NotImplementedError

    def _rewind(self):
        """Undo what `_run` does to its own inputs (a step that advances them for the next replay), so that every
        warm-up runs the same step."""

    def capture(self):
        """Warm up twice, capture, return the last eager (warm-up) outputs, cloned."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up: a step that writes the cache rewrites the same slots with the same values
                eager = self._run()
                self._rewind()
        torch.cuda.current_stream().wait_stream(s)
        eager = tuple(x.clone() for x in eager) if isinstance(eager, tuple) else eager.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._run()
        return eager

    def replay(self):
        self.graph.replay()
        return self.out


# ---------------------------------------------------------------------------- decode


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


class DecodeGraphs:
    """An engine's decode graphs, one per batch size, and when they serve a step: captured on first use (checked
    against the eager step), advanced on the device while the same sequences step on, replayed after the
    scheduler or the cache changed what they hold. Any failure turns them off for good (warning and note)."""

    def __init__(self, runner: ModelRunner, scheduler, on: bool, fallback: Callable[[str, Exception], None]):
        self.runner, self.scheduler, self.on, self.fallback = runner, scheduler, on, fallback
        self.graphs: dict[int, DecodeGraph] = {}

    @property
    def captured(self) -> bool:
        """Whether decode steps run as captured graphs (one has been captured, none failed)."""
        return bool(self.graphs) and self.on

    def logits(self, seqs: list[int], tokens) -> torch.Tensor | None:
        """The step's logits from its graph (valid until the graph's next replay), or None when graphs are off
        or fail. tokens: host list or device tensor [B]."""
        if not self.on:
            return None
        try:
            return self._step(seqs, tokens)
        except Exception as e:  # capture problems must never change results: fall back
            self.on = False
            self.graphs.clear()
            self.fallback("CUDA graph decode", e)
            return None

    def _step(self, seqs: list[int], tokens) -> torch.Tensor:
        sched = self.scheduler
        g = self.graphs.get(len(seqs))
        starts = sched.begin_decode(seqs)
        if g is None or g.seqs != seqs:
            g = DecodeGraph(self.runner, seqs, sched.max_seq_len)
            logits, replayed = g.capture_step(tokens, starts)
            err = max_rel_error(replayed, logits)
            if not math.isfinite(err) or err > 1e-3:
                raise RuntimeError(f"graph replay differs from the eager step (max rel err {err:.2e})")
            self.graphs[len(seqs)] = g
        elif g.state == (sched.epoch, starts) and not g.tables_changed():
            logits = g.advance(tokens)  # device-side +1 on positions/lengths: no host copies
        else:
            logits = g.replay_step(tokens, starts)
        sched.end_decode(seqs, starts)
        g.state = (sched.epoch, [p + 1 for p in starts])
        return logits


# ---------------------------------------------------------------------------- prefill


BUCKETS = (16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096)
# Longer steps run eager by default: 31B's 4,096-token prefill is GPU-bound (wall 431 vs kernels 427 ms), but
# E4B's is not quite (63.3 vs 59.1 ms, conf/perf steps), hence the opt-in larger buckets.
DEFAULT_MAX_TOKENS = 2048


def bucket_for(n: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> int | None:
    """The smallest bucket of at most max_tokens holding n tokens, or None (run eager)."""
    return next((t for t in BUCKETS if n <= t <= max_tokens), None)


def check_max_tokens(max_tokens: int) -> int:
    if max_tokens not in BUCKETS:
        raise ValueError(f"prefill graph tokens {max_tokens!r}: not a bucket; allowed: {', '.join(map(str, BUCKETS))}")
    return max_tokens


class PrefillGraph(CapturedStep):
    """Steps of up to `tokens` new tokens for one sequence, on the groups' prefill backends."""

    def __init__(self, runner: ModelRunner, tokens: int, max_seq_len: int):
        self.runner, self.t = runner, tokens
        dev = runner.device
        self.ids = torch.zeros(tokens, dtype=torch.long, device=dev)
        self.pos = torch.zeros(tokens, dtype=torch.long, device=dev)
        # pad keys reach p0 + T: tables and max_seqlen_k cover max_seq_len + T
        self.metas, self.slots, self.width = static_metadata(runner, 1, tokens, max_seq_len + tokens)

    def fill(self, seq: int, start: int, tokens: list[int]) -> None:
        n, t = len(tokens), self.t
        if not 0 < n <= t:
            raise ValueError(f"a step of {n} tokens does not fit a {t}-token prefill graph")
        self.ids.copy_(torch.tensor(tokens + [0] * (t - n), dtype=torch.long), non_blocking=True)
        self.pos.copy_(torch.arange(start, start + t, dtype=torch.long), non_blocking=True)
        used = [start + t]
        tables = {}
        for k, gc in self.runner.cache.groups.items():
            tables[k] = gc.block_table([seq], self.width[k])
            slots = torch.full((t,), -1, dtype=torch.long)
            slots[:n] = gc.slot_mapping([seq], [start], [n])
            self.metas[k].seqused_k.copy_(torch.tensor(used, dtype=torch.int32), non_blocking=True)
            self.metas[k].block_table.copy_(tables[k], non_blocking=True)
            self.slots[k].copy_(slots, non_blocking=True)
        self.runner.prepare_replay(self.metas, used, tables, prefill=True)

    def _run(self) -> torch.Tensor:
        return self.runner.padded_forward(self.ids, self.pos, self.metas, self.slots)

    def step(self, seq: int, start: int, tokens: list[int]) -> torch.Tensor:
        """Hidden states of the n real rows [n, H] (a copy). Captures on first use: a replay that differs
        from the same padded step run eagerly raises (the engine then runs eager)."""
        self.fill(seq, start, tokens)
        n = len(tokens)
        if self.graph is None:
            eager = self.capture()[:n]
            got = self.replay()[:n]
            err = max_rel_error(got.float(), eager.float())
            if not err <= 1e-3:  # NaN fails too
                self.graph = None
                raise RuntimeError(f"prefill graph replay differs from the eager padded step (max rel err {err:.2e})")
            return got.clone()
        return self.replay()[:n].clone()


class PrefillGraphs:
    """An engine's prefill graphs, one per bucket, and when they serve a step. A capture or replay that fails
    turns them off for good (warning and note); a step the captured launch cannot serve (ReplayShapeError)
    runs eager once, with one note, and the graphs stay."""

    def __init__(self, runner: ModelRunner, max_seq_len: int, on: bool, notes: list[str],
                 fallback: Callable[[str, Exception], None], max_tokens: int = DEFAULT_MAX_TOKENS):
        self.runner, self.max_seq_len, self.on, self.notes, self.fallback = runner, max_seq_len, on, notes, fallback
        self.max_tokens = check_max_tokens(max_tokens)
        self.graphs: dict[int, PrefillGraph] = {}
        self.steps = 0  # steps that replayed a graph (reported by benchmarks)
        self._noted_eager = False

    def hidden(self, seq: int, start: int, tokens: list[int]) -> torch.Tensor | None:
        """The step's hidden states [n, H] from its bucket's graph, or None (off, no bucket, or failed)."""
        t = bucket_for(len(tokens), self.max_tokens)
        if not self.on or t is None:
            return None
        try:
            g = self.graphs.get(t)
            if g is None:
                g = self.graphs[t] = PrefillGraph(self.runner, t, self.max_seq_len)
            out = g.step(seq, start, tokens)
        except ReplayShapeError as e:
            if not self._noted_eager:
                self._noted_eager = True
                self.notes.append(f"CUDA graph prefill: a step ran eager ({e})")
            return None
        except Exception as e:  # capture problems must never change results: fall back
            self.on = False
            self.graphs.clear()
            self.fallback("CUDA graph prefill", e)
            return None
        self.steps += 1
        return out


# ---------------------------------------------------------------------------- speculative rounds


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
