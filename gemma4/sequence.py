"""Per-sequence state of the engine: how many tokens are cached, which are provisional, image spans.

A sequence's `length` counts its committed tokens (their K/V are in the cache and every later
step reads them). A speculative verify pass writes tokens past it as *pending*
(`Engine.extend(..., commit=False)`); `Engine.commit` accepts a prefix of them, and the next step
overwrites the rest (their slots stay allocated). `written` is where the last pass stopped writing,
pending tokens included (HF's drafter reads those positions: gemma4/draft_kv.py `kv_view`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sequence:
    id: int
    length: int = 0  # committed tokens in the cache
    written: int = 0  # positions the last pass wrote end here (>= length)
    mm_spans: list[tuple[int, int]] = field(default_factory=list)  # vision mode: [start, end) image spans

    @property
    def pending(self) -> int:
        """Tokens written after `length` and not committed."""
        return self.written - self.length


@dataclass(frozen=True)
class StepBatch:
    """One forward step: sequence seqs[i] appends qlens[i] tokens at positions starts[i] ..."""

    seqs: list[int]
    starts: list[int]
    qlens: list[int]

    @property
    def kvlens(self) -> list[int]:
        return [p + n for p, n in zip(self.starts, self.qlens)]


class SequenceTable:
    """The engine's sequences by id."""

    def __init__(self, max_seqs: int):
        self.max_seqs = max_seqs
        self._seqs: dict[int, Sequence] = {}

    def __contains__(self, seq: int) -> bool:
        return seq in self._seqs

    def __getitem__(self, seq: int) -> Sequence:
        return self._seqs[seq]

    def get_or_add(self, seq: int) -> Sequence:
        s = self._seqs.get(seq)
        if s is None:
            if len(self._seqs) >= self.max_seqs:
                raise ValueError(f"more than max_seqs={self.max_seqs} sequences")
            s = self._seqs[seq] = Sequence(seq)
        return s

    def length(self, seq: int) -> int:
        s = self._seqs.get(seq)
        return s.length if s is not None else 0

    def lengths(self) -> dict[int, int]:
        return {i: s.length for i, s in self._seqs.items()}

    def spans(self) -> dict[int, list[tuple[int, int]]]:
        return {i: list(s.mm_spans) for i, s in self._seqs.items() if s.mm_spans}

    def remove(self, seq: int) -> None:
        self._seqs.pop(seq, None)

    def clear(self) -> None:
        self._seqs.clear()
