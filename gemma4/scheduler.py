"""What each sequence holds and the cache blocks each step writes: the engine's scheduler.

`begin_step` checks a step (each sequence appends some tokens after its committed ones) and gives its
sequences the blocks it writes (windowed groups trimmed first); `end_step` records what the forward wrote,
committed or pending (gemma4/sequence.py). Speculative decoding's API sits here too: `reserve` blocks up
front, `commit` a prefix of the pending tokens, `rollback` a sequence. `epoch` counts the changes a captured
decode graph cannot see on the device (gemma4/graphs.py): a reset, an eager step, a commit or a rollback.
"""

from __future__ import annotations

from .kv_cache import PagedKVCache
from .sampling import integer_type
from .sequence import SequenceTable, StepBatch


class Scheduler:
    def __init__(self, cache: PagedKVCache, max_seqs: int, max_seq_len: int, max_step_tokens: int | None):
        self.cache = cache
        self.sequences = SequenceTable(max_seqs)
        self.max_seq_len, self.max_step_tokens = max_seq_len, max_step_tokens
        self.epoch = 0

    def reset(self) -> None:
        self.cache.release_all()
        self.sequences.clear()
        self.epoch += 1  # captured graphs stay; their static inputs are reloaded before the next replay

    def reserve(self, seq: int, num_tokens: int) -> None:
        """Make room for `seq` to hold `num_tokens` tokens (a new sequence starts empty): blocks are
        allocated now in every group without a window (static block tables for CUDA graphs; windowed
        groups allocate as they go, reusing what they give back)."""
        if num_tokens > self.max_seq_len:
            raise ValueError(f"sequence {seq} would have {num_tokens} tokens > max_seq_len={self.max_seq_len}")
        self.sequences.get_or_add(seq)
        self.cache.reserve(seq, num_tokens)

    def commit(self, seq: int, num_tokens: int) -> None:
        """Accept the first `num_tokens` pending tokens of `seq` (written by `extend(..., commit=False)`);
        the rest are dropped (their slots stay allocated and the next pass overwrites them)."""
        s = self.sequences[seq]
        if not 0 <= num_tokens <= s.pending:
            raise ValueError(f"cannot commit {num_tokens} tokens of sequence {seq}: it has {s.pending} pending")
        s.length += num_tokens
        self.epoch += 1

    def rollback(self, seq: int, length: int) -> None:
        """Keep the first `length` committed tokens of `seq` (the rest are dropped)."""
        s = self.sequences[seq] if seq in self.sequences else None
        have = s.length if s is not None else 0
        if not 0 < length <= have:
            raise ValueError(f"cannot roll sequence {seq} back to {length} (it has {have})")
        if not self.cache.can_resume_at(seq, length):
            raise ValueError(f"cannot roll sequence {seq} back to {length}: its sliding-window cache already "
                             "gave back blocks that position's window reads")
        s.length = length
        self.epoch += 1

    def release(self, seq: int) -> None:
        """Forget `seq` and give its blocks back."""
        self.cache.release(seq)
        self.sequences.remove(seq)

    def begin_step(self, seqs: list[int], qlens: list[int]) -> StepBatch:
        """Check a step (seqs[i] appends qlens[i] tokens after its committed ones) and give its
        sequences the blocks it writes (trimming windowed groups first)."""
        if self.max_step_tokens and max(qlens) > self.max_step_tokens:
            raise ValueError(f"a step of {max(qlens)} tokens for one sequence > max_step_tokens="
                             f"{self.max_step_tokens}: prefill long prompts with Engine.prefill (chunks)")
        batch = StepBatch(list(seqs), [self.sequences.length(s) for s in seqs], list(qlens))
        for s, p0, n in zip(seqs, batch.starts, batch.kvlens):
            if n > self.max_seq_len:
                raise ValueError(f"sequence {s} would have {n} tokens > max_seq_len={self.max_seq_len}")
            self.sequences.get_or_add(s)
            self.cache.step(s, p0, n)
        return batch

    def end_step(self, batch: StepBatch, *, commit: bool = True) -> None:
        """After a step's forward: its tokens are written; committed, or pending (see `commit`)."""
        self.epoch += 1
        for s, p0, n in zip(batch.seqs, batch.starts, batch.qlens):
            seq = self.sequences[s]
            seq.written = p0 + n
            seq.length = p0 + n if commit else p0

    def begin_decode(self, seqs: list[int]) -> list[int]:
        """A captured decode step's blocks (one token per sequence); returns where each sequence's token goes."""
        starts = [self.sequences.length(s) for s in seqs]
        for s, p in zip(seqs, starts):
            if p + 1 > self.max_seq_len:
                raise ValueError(f"sequence {s} exceeds max_seq_len")
            self.cache.step(s, p, p + 1)
        return starts

    def end_decode(self, seqs: list[int], starts: list[int]) -> None:
        """After a captured decode step: each sequence committed its token (the graph already moved its
        device positions, so the epoch stays)."""
        for s, p in zip(seqs, starts):
            seq = self.sequences.get_or_add(s)
            seq.length = seq.written = p + 1

    def add_spans(self, batch: StepBatch, mm_spans: list[list[tuple[int, int]]]) -> None:
        """Attach image spans [start, end) to the sequences of a step; each must lie inside the step's tokens."""
        if len(mm_spans) != len(batch.seqs):
            raise ValueError("mm_spans needs one list of spans per sequence")
        for s, p0, n, sp in zip(batch.seqs, batch.starts, batch.kvlens, mm_spans):
            sp = sorted((int(a), int(e)) for a, e in sp)
            for j, (a, e) in enumerate(sp):
                if not p0 <= a < e <= n:
                    raise ValueError(f"sequence {s}: image span [{a}, {e}) must lie inside the tokens of this "
                                     f"step [{p0}, {n}) (a bidirectional span is prefilled in one step)")
                if j and a < sp[j - 1][1]:
                    raise ValueError(f"sequence {s}: image spans {sp[j - 1]} and {(a, e)} overlap")
            self.sequences[s].mm_spans.extend(sp)


def check_token_ids(seqs: list[int], tokens: list[list[int]], vocab: int) -> None:
    """Host token ids must be integers (Python's or NumPy's; not bools, not floats, which the id tensor would
    silently truncate) in [0, vocab): anything else is refused here, where a kernel could only read out of
    bounds or assert on the device. Types as a set and min/max per sequence, not a Python loop per token: this
    runs before every prefill."""
    for s, ts in zip(seqs, tokens):
        kinds = set(map(type, ts))
        if kinds != {int} and not all(integer_type(k) for k in kinds):
            bad = next(t for t in ts if not integer_type(type(t)))
            raise ValueError(f"sequence {s}: token id {bad!r} is not an integer in [0, {vocab}) (the model's "
                             "vocabulary)")
        if not (0 <= min(ts) and max(ts) < vocab):
            bad = next(t for t in ts if not 0 <= t < vocab)
            raise ValueError(f"sequence {s}: token id {bad!r} is not in [0, {vocab}) (the model's vocabulary)")
