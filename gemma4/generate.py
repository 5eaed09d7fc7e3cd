"""The one generation loop of gemma4, over a step strategy: plain decoding (`PlainDecoding`, one token per
sequence a step: `Engine.generate`) or speculative decoding (gemma4/speculative.py `SpeculativeRounds`: a
round of drafts and one verify pass: `SpeculativeDecoder.generate`).

    check the request, reset the engine, reserve every sequence's blocks up front (static block tables for
    CUDA graphs), then on the clock: the prompt pass and the first tokens, then steps until the strategy
    says every sequence is finished; the result carries both phases' seconds.

What a sequence keeps is the same rule for both (`Outputs`): at most max_new_tokens, and nothing after
its EOS when stop_at_eos.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .sampling import check_request, sample

EOS_CHECK_EVERY = 16  # graph decode: steps between host-side "all sequences finished?" checks


@dataclass
class Request:
    """One generate call: the prompts and how to pick and stop."""

    prompts: list[list[int]]
    max_new_tokens: int
    temperature: float
    top_k: int
    eos: int
    stop_at_eos: bool
    generator: torch.Generator | None  # seeded, for sampling (None: greedy)
    mm_spans: list[list[tuple[int, int]]] | None = None

    @property
    def seqs(self) -> list[int]:
        return list(range(len(self.prompts)))

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        return sample(logits, self.temperature, self.top_k, self.generator)


class Outputs:
    """The tokens each sequence keeps, and whether it is done: max_new_tokens reached, or its EOS (stop_at_eos)."""

    def __init__(self, req: Request, first: list[int]):
        self.req = req
        self.tokens: list[list[int]] = []
        self.done: list[bool] = []
        for t in first:
            self.tokens.append([])
            self.done.append(False)
            self.add(len(self.tokens) - 1, [t])

    def add(self, i: int, toks: list[int]) -> list[int]:
        """Append what sequence i keeps of `toks` (its budget, up to its EOS); returns that."""
        r = self.req
        toks = toks[: r.max_new_tokens - len(self.tokens[i])]
        if r.stop_at_eos and r.eos in toks:
            toks = toks[: toks.index(r.eos) + 1]
        self.tokens[i].extend(toks)
        self.done[i] = len(self.tokens[i]) >= r.max_new_tokens or (r.stop_at_eos and toks[-1] == r.eos)
        return toks


def generation_loop(engine, strategy, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int = 0, seed: int = 0, eos_token_id: int | None = None, stop_at_eos: bool = True,
             mm_spans: list[list[tuple[int, int]]] | None = None):
    """Generate for a batch with `strategy` (`PlainDecoding`, gemma4/speculative.py `SpeculativeRounds`), which
    answers: lookahead (positions past max_new_tokens a step may write), check(req), begin(req), prefill(req),
    finished(req), step(req), result(req, prefill_s, decode_s)."""
    check_request(prompts, max_new_tokens, temperature, top_k, max_seqs=engine.max_seqs,
                  max_seq_len=engine.max_seq_len)
    strategy.check(max_new_tokens)
    engine.reset()
    eos = engine.args.eos_token_id if eos_token_id is None else eos_token_id
    gen = torch.Generator(device=engine.device).manual_seed(seed) if temperature > 0 else None
    req = Request(prompts, max_new_tokens, temperature, top_k, eos, stop_at_eos, gen, mm_spans)
    for s, p in zip(req.seqs, prompts):  # every position a step may write: < len(p) + max_new_tokens (+ lookahead)
        engine.reserve(s, min(engine.max_seq_len, len(p) + max_new_tokens + strategy.lookahead))
    strategy.begin(req)
    clock = Clock(engine.device)
    clock.mark()
    strategy.prefill(req)
    clock.mark()
    while not strategy.finished(req):
        strategy.step(req)
    clock.mark()
    prefill_s, decode_s = clock.seconds()
    return strategy.result(req, prefill_s, decode_s)


# ---------------------------------------------------------------------------- plain decoding


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # generated tokens per sequence (stops after EOS when stop_at_eos)
    prompt_tokens: int
    decode_tokens: int  # tokens produced by decode steps (all sequences of the batch)
    prefill_s: float
    decode_s: float
    logits: list[torch.Tensor] | None = None  # per step [B, V] (prefill last-token first), if asked
    steps: list[list[int]] = field(default_factory=list)  # per step, the token picked for every sequence
    cuda_graphs: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else float("inf")

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else float("nan")


class PlainDecoding:
    """One token per sequence a step, all sequences in lock step (finished ones keep a stable batch shape; their
    extra tokens are dropped at the end). `forced`: teacher-force these continuations instead of sampling.

    Tokens (and logits) stay on the device until the end; the loop waits for the device only to ask whether
    every sequence has finished: every step eager, every EOS_CHECK_EVERY steps with graphs (same tokens either
    way; decode_tokens counts the steps actually run)."""

    lookahead = 0

    def __init__(self, engine, *, forced: list[list[int]] | None = None, return_logits: bool = False):
        self.engine = engine
        self.forced = forced
        self.return_logits = return_logits

    def check(self, max_new_tokens: int) -> None:
        pass

    def begin(self, req: Request) -> None:
        dev = self.engine.device
        self.forced_t = (torch.tensor(self.forced, dtype=torch.long).T.contiguous().to(dev)
                         if self.forced is not None else None)  # [steps, B]
        self.logs: list[torch.Tensor] = []
        self.toks: list[torch.Tensor] = []
        self.finished_at = torch.zeros(len(req.prompts), dtype=torch.bool, device=dev)
        self.seen = 0  # tokens folded into `finished_at` when it is read, not every step (two kernels fewer a step)
        self.check_every = EOS_CHECK_EVERY if self.engine.use_graphs else 1
        self.step_no = 1
        self.steps = 0

    def pick(self, req: Request, logits: torch.Tensor) -> torch.Tensor:
        if self.return_logits:
            self.logs.append(logits.to(torch.float32, copy=True))
        nxt = self.forced_t[len(self.toks)] if self.forced_t is not None else req.sample(logits)
        self.toks.append(nxt)
        return nxt

    def prefill(self, req: Request) -> None:
        self.nxt = self.pick(req, self.engine.prefill(req.seqs, req.prompts, mm_spans=req.mm_spans))

    def finished(self, req: Request) -> bool:
        if self.step_no >= req.max_new_tokens:
            return True
        if req.stop_at_eos and self.step_no % self.check_every == 0:
            self.finished_at |= (torch.stack(self.toks[self.seen:]) == req.eos).any(0)
            self.seen = len(self.toks)
            return bool(self.finished_at.all())
        return False

    def step(self, req: Request) -> None:
        self.nxt = self.pick(req, self.engine.decode_step(req.seqs, self.nxt))
        self.steps += 1
        self.step_no += 1

    def result(self, req: Request, prefill_s: float, decode_s: float) -> GenerationResult:
        rows = torch.stack(self.toks).tolist()  # [1 + steps, B]
        out = Outputs(req, rows[0])
        used = 1
        for row in rows[1:]:
            if all(out.done):
                break
            used += 1
            for i, t in enumerate(row):
                if not out.done[i]:
                    out.add(i, [t])
        eng = self.engine
        return GenerationResult(
            tokens=out.tokens, prompt_tokens=sum(map(len, req.prompts)), decode_tokens=self.steps * len(req.prompts),
            prefill_s=prefill_s, decode_s=decode_s,
            logits=[x.cpu() for x in self.logs[:used]] if self.return_logits else None, steps=rows[:used],
            cuda_graphs=eng.graphs_captured, notes=list(eng.notes))


class Clock:
    """Marks on the device's timeline (CUDA events: no sync until `seconds`), or the host's on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Seconds between consecutive marks."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]
