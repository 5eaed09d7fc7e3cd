"""One sequence's multi-token step (a prompt, or a chunk of one) captured as a CUDA graph per token bucket.

Why: an eager prefill of a short prompt is host-bound on the H200's host. E4B's 512-token prefill took
27 ms of wall time for 9 ms of kernels, and which backend's host path was slower moved between runs
(bench/results/h200/objective_at_run/README.md, "The prefill profile"). A replayed graph leaves the host
out, so the kernels the selector measured are what the step costs.

A step of n new tokens runs padded to the bucket T >= n, as if the sequence appended T tokens: the
metadata say T queries over p0 + T keys. So every launch (grids, FlashInfer's plan for a prompt at
p0 = 0) depends on T alone. Real row j sits at position p0 + j and, causally, sees exactly the keys it
sees eagerly. The T - n pad rows write no K/V (slot -1, skipped by the cache-write kernel). They read
whatever their table entries hold (reserved blocks, or block 0 as table padding), and their outputs are
dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..backends.base import ReplayShapeError
from .cuda_graph import CapturedStep
from .decode_graph import static_metadata
from .model_runner import ModelRunner
from .sampling import max_rel_error

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
