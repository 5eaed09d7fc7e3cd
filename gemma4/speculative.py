"""Speculative decoding with the Gemma-4 MTP drafter over the target's paged KV cache.

One round, for every unfinished sequence of a batch (unequal lengths; varlen throughout):

1. propose  k draft tokens with the drafter, all at the constant draft position P (the position of
            the last token the target produced, not yet in its cache), reading the target's cache
            through `DraftKVBinding` (same tensors and block tables, the draft group's backend and
            K/V scales). The drafter writes nothing.
2. verify   one target forward over the k+1 tokens [last, d1..dk] at positions P..P+k: a
            prefill-style chunk per sequence over the paged cache; it writes their K/V.
3. accept   greedy: the longest prefix of drafts equal to the target's argmax, plus the target's
            token after it. Sampled: standard rejection sampling (accept d_j with probability
            min(1, p_j(d_j)/q_j(d_j)), else resample from norm(max(p_j - q_j, 0)); a bonus token
            from p_k when all are accepted), seeded by `seed`.
4. commit   the accepted prefix: the verify pass wrote its k+1 tokens as pending
            (`Engine.extend(..., commit=False)`), `Engine.commit` keeps [last] + accepted drafts;
            the slots of the rejected tokens stay allocated and are overwritten by the next
            verification (no block is freed mid-generation; a finished sequence releases its blocks).

The next round drafts from the target's hidden state at the last accepted position and the
embedding of the token the target emitted after it.

CUDA graphs (greedy, when the engine runs graphs): a round replays two captured steps, the k draft steps (gemma4/graphs.py `DraftGraph`) and the verify
pass (`VerifyGraph`); draft tokens go from one to the other on the device, and the round waits for
the device once, for the accepted counts. Between the two the engine trims and allocates blocks
for the verify pass exactly as an eager round does. A captured round always drafts k tokens: where
a sequence's budget keeps fewer, the extra drafts are dropped as if never proposed (blocks are
reserved for k more positions). Sampled rounds, and rounds within k + 1 of max_seq_len, run
eagerly; results are the same either way (the captured steps are checked against an eager run at
capture).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .draft_kv import DraftKVBinding, draft_groups_of
from .drafter import Drafter, draft_inputs
from .engine import chunk_ends
from .generate import Outputs, Request, generation_loop
from .sampling import probs_of
from .graphs import SpecGraphs


# ---------------------------------------------------------------------------- acceptance


def accept_greedy(target_logits: torch.Tensor, drafts: list[int]) -> tuple[list[int], int]:
    """target_logits [k+1, V] at positions P..P+k. Returns (emitted tokens, accepted drafts)."""
    t = target_logits.argmax(-1).tolist()
    n = 0
    while n < len(drafts) and drafts[n] == t[n]:
        n += 1
    return list(drafts[:n]) + [t[n]], n


def rejection_sample(p: torch.Tensor, q: torch.Tensor, drafts: list[int],
                     generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023): p [k+1, V] target
    probabilities at positions P..P+k, q [k, V] the draft probabilities the drafts were sampled
    from. The emitted tokens are distributed exactly as sampling the target token by token."""
    dev = p.device
    out: list[int] = []
    for j, d in enumerate(drafts):
        u = torch.rand((), generator=generator, device=dev)
        if float(u) * float(q[j, d]) <= float(p[j, d]):
            out.append(d)
            continue
        resid = (p[j] - q[j]).clamp_min(0)
        total = resid.sum()
        resid = resid / total if float(total) > 0 else p[j]
        out.append(int(torch.multinomial(resid, 1, generator=generator)))
        return out, j
    out.append(int(torch.multinomial(p[len(drafts)], 1, generator=generator)))
    return out, len(drafts)


# ---------------------------------------------------------------------------- results


@dataclass
class SpecStats:
    rounds: int = 0  # verification rounds, summed over sequences
    proposed: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens the target accepted
    emitted: int = 0  # tokens emitted by verification rounds (accepted drafts + the target's token)
    proposed_at: list[int] = field(default_factory=list)  # per draft index j
    accepted_at: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per verification pass and sequence (1 + accepted drafts): the decode speed-up
        bound with a free drafter."""
        return self.emitted / self.rounds if self.rounds else float("nan")

    def add(self, proposed: int, accepted: int, emitted: int) -> None:
        self.rounds += 1
        self.proposed += proposed
        self.accepted += accepted
        self.emitted += emitted
        while len(self.proposed_at) < proposed:
            self.proposed_at.append(0)
            self.accepted_at.append(0)
        for j in range(proposed):
            self.proposed_at[j] += 1
            self.accepted_at[j] += int(j < accepted)

    def to_dict(self) -> dict:
        return dict(rounds=self.rounds, proposed=self.proposed, accepted=self.accepted, emitted=self.emitted,
                    acceptance_rate=self.acceptance_rate, mean_accepted_length=self.mean_accepted_length,
                    acceptance_at=[a / p if p else None for a, p in zip(self.accepted_at, self.proposed_at)])


@dataclass
class SpecResult:
    tokens: list[list[int]]
    prompt_tokens: int
    decode_tokens: int  # tokens emitted after the prefill's first token, all sequences
    prefill_s: float
    decode_s: float
    stats: SpecStats
    target_passes: int  # batched verification forwards
    draft_passes: int  # batched drafter forwards
    proposals: list[list[list[int]]] | None = None  # per sequence, per round: the draft tokens
    graph_rounds: int = 0  # rounds run as captured draft + verify steps
    notes: list[str] = field(default_factory=list)

    @property
    def cuda_graphs(self) -> bool:
        return self.graph_rounds > 0

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else float("nan")


# ---------------------------------------------------------------------------- the decoder


class SpeculativeDecoder:
    """Target `Engine` + `Drafter`. `selection` supplies the draft groups (backend, KV scales);
    without draft groups they are derived from the target's (`copy_scales` then decides)."""

    def __init__(self, engine, drafter: Drafter, selection=None, *, num_speculative_tokens: int = 4,
                 copy_scales: bool | None = None, kv_view: str = "committed", draft_backends: dict | None = None):
        if num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1")
        self.engine = engine
        self.target = engine.model
        self.drafter = drafter.eval()
        self.k = int(num_speculative_tokens)
        self.draft_groups = draft_groups_of(selection, engine.groups, copy_scales=copy_scales)
        self.binding = DraftKVBinding(engine.args, drafter.args, engine.cache, self.draft_groups, engine.groups,
                                      backends=draft_backends, copy_scales=copy_scales, kv_view=kv_view)
        self.graphs = SpecGraphs(self)
        self.target_passes = 0
        self.draft_passes = 0

    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def scales_mode(self) -> dict[str, str]:
        return dict(self.binding.scales_mode)

    # -------------------------------------------------------------- target
    @torch.inference_mode()
    def target_forward(self, seqs: list[int], tokens: list[list[int]],
                       mm_spans: list[list[tuple[int, int]]] | None = None, *, commit: bool = True):
        """Append tokens[i] to seqs[i] in the target's cache (one varlen forward; image spans as in
        Engine.extend; commit=False: as pending tokens, see Engine.commit). Returns per sequence
        (logits [n_i, V], final-normed hidden [n_i, H])."""
        eng = self.engine
        hidden, qlens = eng.extend_hidden(seqs, tokens, mm_spans=mm_spans, commit=commit)
        logits = eng.runner.logits(hidden)
        self.target_passes += 1
        return list(logits.split(qlens)), list(hidden.split(qlens))

    # -------------------------------------------------------------- drafter
    @torch.inference_mode()
    def propose(self, seqs: list[int], tokens: list[int], hidden: list[torch.Tensor], counts: list[int], *,
                temperature: float = 0.0, top_k: int = 0, generator: torch.Generator | None = None,
                return_logits: bool = False):
        """Draft counts[i] tokens for each sequence from (its last emitted token, the target's hidden
        state before it), all at the constant position P = its cached length.

        Returns (drafts per sequence, draft probabilities per sequence [counts_i, V] or None when
        greedy, draft logits per sequence [counts_i, V] or None)."""
        eng = self.engine
        b = len(seqs)
        drafts: list[list[int]] = [[] for _ in range(b)]
        qs: list[list[torch.Tensor]] = [[] for _ in range(b)]
        lg: list[list[torch.Tensor]] = [[] for _ in range(b)]
        if b == 0 or max(counts, default=0) == 0:
            return drafts, None if temperature <= 0 else [None] * b, [None] * b if return_logits else None
        cur = torch.tensor(tokens, dtype=torch.long, device=self.device)
        h = torch.stack([x.reshape(-1) for x in hidden]).to(self.device)
        positions = [eng.sequences.length(s) for s in seqs]
        written = [max(eng.sequences[s].written, p) for s, p in zip(seqs, positions)]
        for j in range(max(counts)):
            act = [i for i in range(b) if counts[i] > j]
            ctx = self.binding.context([seqs[i] for i in act], [positions[i] for i in act],
                                       [written[i] for i in act], self.device)
            idx = torch.tensor(act, dtype=torch.long, device=self.device)
            logits, h_next = self.drafter(draft_inputs(self.target, cur[idx], h[idx]), ctx)
            self.draft_passes += 1
            if temperature <= 0:
                d = logits.argmax(-1)
            else:
                q = probs_of(logits, temperature, top_k)
                d = torch.multinomial(q, 1, generator=generator).squeeze(-1)
            cur[idx] = d
            h[idx] = h_next.to(h.dtype)
            for r, i in enumerate(act):
                drafts[i].append(int(d[r]))
                if temperature > 0:
                    qs[i].append(q[r])
                if return_logits:
                    lg[i].append(logits[r])
        qprobs = None if temperature <= 0 else [torch.stack(x) if x else None for x in qs]
        logs = [torch.stack(x) if x else None for x in lg] if return_logits else None
        return drafts, qprobs, logs

    # -------------------------------------------------------------- generation
    def _prefill(self, seqs: list[int], prompts: list[list[int]], mm_spans=None):
        """The prompt pass: target_forward over each prompt's last prefill chunk (image spans kept
        whole, see engine.chunk_ends), the rest prefilled before it in steps of at most the engine's
        max_step_tokens. Drafts and verify steps come after every span, so only this pass sees spans."""
        c = self.engine.max_step_tokens
        spans = mm_spans or [[] for _ in prompts]
        cuts = [chunk_ends(len(p), 0, sp, c)[-2] if c and len(p) > c else 0 for p, sp in zip(prompts, spans)]
        heads = [i for i, n in enumerate(cuts) if n]
        if heads:
            self.engine.prefill([seqs[i] for i in heads], [prompts[i][:cuts[i]] for i in heads],
                                mm_spans=[[x for x in spans[i] if x[1] <= cuts[i]] for i in heads]
                                if mm_spans is not None else None)
        tails = [[x for x in sp if x[0] >= n] for sp, n in zip(spans, cuts)] if mm_spans is not None else None
        return self.target_forward(seqs, [p[n:] for p, n in zip(prompts, cuts)], mm_spans=tails)

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int = 16, *, temperature: float = 0.0,
                 top_k: int = 0, seed: int = 0, eos_token_id: int | None = None, stop_at_eos: bool = True,
                 record: bool = False, num_speculative_tokens: int | None = None,
                 mm_spans: list[list[tuple[int, int]]] | None = None) -> SpecResult:
        """Speculative generation for a batch: gemma4/generate.py's loop with `SpeculativeRounds`. Greedy
        (temperature 0) emits exactly the target's greedy tokens; sampled decoding emits the target's sampling
        distribution (seeded). `mm_spans`: image spans per prompt (vision mode), as in Engine.generate."""
        rounds = SpeculativeRounds(self, int(num_speculative_tokens or self.k), record=record)
        return generation_loop(self.engine, rounds, prompts, max_new_tokens, temperature=temperature, top_k=top_k,
                               seed=seed, eos_token_id=eos_token_id, stop_at_eos=stop_at_eos, mm_spans=mm_spans)


class SpeculativeRounds:
    """The step strategy of speculative decoding (gemma4/generate.py): a step is one round for every unfinished
    sequence (drafts, one verify pass, acceptance, commit; see the module docstring); a sequence that finishes
    gives its blocks back."""

    def __init__(self, decoder: SpeculativeDecoder, k: int, *, record: bool = False):
        self.sd, self.engine, self.k, self.record = decoder, decoder.engine, k, record
        # captured rounds always draft k, also when the budget keeps fewer: blocks for k more positions
        self.lookahead = k if decoder.graphs.enabled else 0

    def check(self, max_new_tokens: int) -> None:
        eng = self.engine
        if eng.max_step_tokens and self.k + 1 > eng.max_step_tokens:
            raise ValueError(f"a verify step writes num_speculative_tokens + 1 = {self.k + 1} tokens > the engine's "
                             f"max_step_tokens={eng.max_step_tokens}")

    def begin(self, req: Request) -> None:
        self.sd.target_passes = self.sd.draft_passes = 0
        self.stats = SpecStats()
        self.props: list[list[list[int]]] = [[] for _ in req.seqs]
        self.notes0 = len(self.engine.notes)
        self.graph_rounds = 0

    def prefill(self, req: Request) -> None:
        logits, hidden = self.sd._prefill(req.seqs, req.prompts, req.mm_spans)
        first = req.sample(torch.stack([lg[-1] for lg in logits])).tolist()
        self.out = Outputs(req, first)
        self.last = list(first)
        self.h_prev = [hd[-1] for hd in hidden]
        for s in req.seqs:
            if self.out.done[s]:
                self.engine.release(s)

    def finished(self, req: Request) -> bool:
        return all(self.out.done)

    def step(self, req: Request) -> None:
        sd, eng, k, out, last, h_prev = self.sd, self.engine, self.k, self.out, self.last, self.h_prev
        greedy = req.temperature <= 0
        act = [s for s in req.seqs if not out.done[s]]
        counts = [max(0, min(k, req.max_new_tokens - len(out.tokens[s]) - 1)) for s in act]
        rnd = None
        room = max(eng.sequences.length(s) for s in act) + k + 1 <= eng.max_seq_len
        if greedy and room and sd.graphs.enabled:
            rnd = sd.graphs.round(act, [last[s] for s in act], [h_prev[s] for s in act], k)
            self.graph_rounds += rnd is not None
        if rnd is not None:  # drafts beyond a sequence's budget: dropped, as if never proposed
            drafts, emitted_at, vhidden = rnd
            drafts = [d[:c] for d, c in zip(drafts, counts)]
            sd.target_passes += 1
            sd.draft_passes += k
        else:
            drafts, qprobs, _ = sd.propose(act, [last[s] for s in act], [h_prev[s] for s in act], counts,
                                           temperature=req.temperature, top_k=req.top_k, generator=req.generator)
            vlogits, vhidden = sd.target_forward(act, [[last[s]] + drafts[i] for i, s in enumerate(act)],
                                                 commit=False)
        for i, s in enumerate(act):
            if rnd is not None:
                toks = emitted_at[i][: counts[i] + 1]
                n = min(len(emitted_at[i]) - 1, counts[i])
            elif greedy:
                toks, n = accept_greedy(vlogits[i], drafts[i])
            else:
                p = probs_of(vlogits[i], req.temperature, req.top_k)
                toks, n = rejection_sample(p, qprobs[i], drafts[i], req.generator) if drafts[i] else (
                    [int(torch.multinomial(p[0], 1, generator=req.generator))], 0)
            toks = out.add(s, toks)
            self.stats.add(len(drafts[i]), n, len(toks))
            if self.record:
                self.props[s].append(list(drafts[i]))
            eng.commit(s, len(toks))  # [last] + the accepted drafts are now cached
            last[s] = toks[-1]
            h_prev[s] = vhidden[i][len(toks) - 1]
            if out.done[s]:
                eng.release(s)

    def result(self, req: Request, prefill_s: float, decode_s: float) -> SpecResult:
        out, sd = self.out.tokens, self.sd
        return SpecResult(
            tokens=out, prompt_tokens=sum(map(len, req.prompts)), decode_tokens=sum(len(o) - 1 for o in out),
            prefill_s=prefill_s, decode_s=decode_s, stats=self.stats, target_passes=sd.target_passes - 1,
            draft_passes=sd.draft_passes, proposals=self.props if self.record else None,
            graph_rounds=self.graph_rounds, notes=self.engine.notes[self.notes0:])


__all__ = ["SpeculativeDecoder", "SpeculativeRounds", "SpecResult", "SpecStats", "accept_greedy", "rejection_sample",
           "probs_of"]
