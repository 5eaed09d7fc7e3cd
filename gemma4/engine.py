"""Batched generation over the paged KV cache, each group's attention on its selected backend.

The engine ties its parts together, one role each: the scheduler (gemma4/scheduler.py: the sequences'
committed and pending tokens and image spans, gemma4/sequence.py, and the blocks each step writes), the paged
cache and its block bookkeeping (gemma4/kv_cache.py on gemma4/block_manager.py), the model runner
(gemma4/model_runner.py: metadata, eager and capture-safe forwards) and the captured graphs (gemma4/graphs.py). `Engine.extend(seqs, tokens)` is the one forward path: it appends tokens to
sequences (a prompt for prefill, one token for decode, several for chunked prefill or a
speculative verify pass), writes their K/V and returns logits. `generate` does greedy or seeded
temperature/top-k sampling over a batch (gemma4/generate.py's loop) and reports prefill and decode tokens/s.

Speculative decoding (gemma4/speculative.py) uses a public API: `reserve` blocks up front,
`extend(..., commit=False)` writes a verify pass as pending tokens, `commit` accepts a prefix of
them, `rollback` shortens a sequence.

On CUDA, decode runs as a CUDA graph when every group's backend `supports_cuda_graphs()` (checked
against an eager step at capture time; any mismatch or capture error falls back to eager with a
warning). `generate` keeps the tokens on the device, so with graphs the decode loop has no
per-step host sync (an EOS check every `EOS_CHECK_EVERY` steps, gemma4/generate.py; eager checks every step). A
captured graph is kept across `reset()` (static inputs are reloaded before use). One sequence's multi-token
steps (prompts and their chunks, up to 2,048 tokens) replay prefill graphs per token bucket
(gemma4/graphs.py), so a short prompt's prefill is not bound by the host's launches.
"""

from __future__ import annotations

import warnings

import torch

from ..backends.base import AttentionBackend
from ..backends.registry import make_backend
from .engine_config import EngineConfig
from .generate import Clock, GenerationResult, PlainDecoding, generation_loop
from .host_threads import use_serving_threads
from .kv_cache import GROUP_TO_LAYER_TYPE, LAYER_TYPE_TO_GROUP, PagedKVCache, scales_from_amax
from .model import Gemma4
from .graphs import DecodeGraphs, PrefillGraphs
from .model_runner import ModelRunner, MultimodalUnsupportedError
from .sampling import max_rel_error, sample
from .scheduler import Scheduler, check_token_ids
from .sequence import StepBatch
from ..kernels.dtypes import dtype_name
from ..selector.config.vocab import is_fp8 as is_fp8_name
from ..selector.outputs.selection import GroupSelection, Selection

# ---------------------------------------------------------------------------- selections


def model_groups(selection: Selection | dict) -> dict[str, GroupSelection]:
    """The target (non-draft) groups of a selection, keyed by layer type."""
    if isinstance(selection, dict):
        return dict(selection)
    return {GROUP_TO_LAYER_TYPE[g.kind]: g for g in selection.groups if not g.draft}


def reference_groups(groups: dict[str, GroupSelection]) -> dict[str, GroupSelection]:
    """The same groups (block sizes, KV dtype) on the TORCH_REFERENCE backend."""
    out = {}
    for kind, g in groups.items():
        out[kind] = g.model_copy(update=dict(
            backend="TORCH_REFERENCE", flash_attn_version=None, kernel_block_size=g.kv_block_size,
            quant_query=False, descale="k_v" if is_fp8_name(g.kv_cache_dtype) else "none", prefill=None))
    return out


# ---------------------------------------------------------------------------- engine


class Engine:
    """The engine's roles, each its own part: the scheduler (gemma4/scheduler.py: sequences and the blocks each
    step writes), the model runner (gemma4/model_runner.py: a step's forward), the captured graphs
    (gemma4/graphs.py) and the sampling loop (gemma4/generate.py). The engine runs steps through them."""

    def __init__(self, model: Gemma4, selection: Selection | dict[str, GroupSelection],
                 config: EngineConfig = EngineConfig(), *, backends: dict[str, AttentionBackend] | None = None):
        """config: how it runs (gemma4/engine_config.py). backends: attention backends per layer type to use
        instead of the selection's (tests, benchmarks)."""
        self.config = config
        self.model = model.eval()
        self.args = model.args
        self.device = torch.device(config.device) if config.device is not None else model.device
        self.host_threads = (use_serving_threads(self.device) if config.serving_threads
                             else torch.get_num_threads())
        self.groups = model_groups(selection)
        self.backends, self.prefill_backends = attention_backends(self.groups, backends)
        self.max_seqs, self.max_seq_len, self.max_step_tokens = config.max_seqs, config.max_seq_len, config.max_step_tokens
        self.cache = PagedKVCache(self.args, self.groups, max_tokens=config.max_seqs * config.max_seq_len,
                                  device=self.device, model_dtype=model.dtype, max_seqs=config.max_seqs,
                                  step_tokens=config.max_step_tokens)
        if config.kv_scales:
            self.cache.set_scales(config.kv_scales)
        self.scheduler = Scheduler(self.cache, config.max_seqs, config.max_seq_len, config.max_step_tokens)
        self.sequences = self.scheduler.sequences
        self.runner = ModelRunner(self.model, self.cache, self.backends, self.groups, self.device,
                                  prefill_backends=self.prefill_backends)
        self.notes: list[str] = []
        self.decode_graphs = DecodeGraphs(self.runner, self.scheduler, self._graphable(self.backends),
                                          self.note_fallback)
        prefill_on = self.use_graphs and self._graphable(self.prefill_backends) and config.prefill_graphs is not False
        self.prefill_graphs = PrefillGraphs(self.runner, config.max_seq_len, prefill_on, self.notes,
                                            self.note_fallback, config.prefill_graph_tokens)

    def _graphable(self, backends: dict[str, AttentionBackend]) -> bool:
        """CUDA graphs for steps on these backends: on CUDA, where every one supports them, unless turned off."""
        return bool(self.device.type == "cuda" and all(b.supports_cuda_graphs() for b in backends.values())
                    and self.config.cuda_graphs is not False)

    # -------------------------------------------------------------- bookkeeping
    @property
    def seq_lens(self) -> dict[int, int]:
        """Committed tokens per sequence (a copy: change them through extend / commit / rollback)."""
        return self.sequences.lengths()

    @property
    def mm_spans(self) -> dict[int, list[tuple[int, int]]]:
        """Image spans per sequence (a copy)."""
        return self.sequences.spans()

    @property
    def use_graphs(self) -> bool:
        """Whether decode steps may run as CUDA graphs."""
        return self.decode_graphs.on

    @use_graphs.setter
    def use_graphs(self, on: bool) -> None:
        self.decode_graphs.on = on

    @property
    def prefill_graph_steps(self) -> int:
        """Steps that replayed a prefill graph."""
        return self.prefill_graphs.steps

    @property
    def graphs_captured(self) -> bool:
        """Whether decode steps run as captured CUDA graphs (one has been captured, none failed)."""
        return self.decode_graphs.captured

    def backend_names(self) -> dict[str, str]:
        out = {}
        for k, b in self.backends.items():
            g = self.groups[k]
            build = f", {b.kernel_build}" if b.kernel_build else ""
            out[LAYER_TYPE_TO_GROUP[k]] = f"{g.label} ({type(b).__name__}{build})"
            p = self.prefill_backends[k]
            if p is not b:
                pbuild = f", {p.kernel_build}" if p.kernel_build else ""
                out[LAYER_TYPE_TO_GROUP[k]] += f"; prefill {g.prefill.label} ({type(p).__name__}{pbuild})"
        return out

    # -------------------------------------------------------------- sequence API (gemma4/scheduler.py)
    def reset(self) -> None:
        self.scheduler.reset()

    def reserve(self, seq: int, num_tokens: int) -> None:
        self.scheduler.reserve(seq, num_tokens)

    def commit(self, seq: int, num_tokens: int) -> None:
        self.scheduler.commit(seq, num_tokens)

    def rollback(self, seq: int, length: int) -> None:
        self.scheduler.rollback(seq, length)

    def release(self, seq: int) -> None:
        self.scheduler.release(seq)

    def begin_step(self, seqs: list[int], qlens: list[int]) -> StepBatch:
        """For runners that bypass `extend` (captured speculative passes); `end_step` records what it wrote."""
        return self.scheduler.begin_step(seqs, qlens)

    def end_step(self, batch: StepBatch, *, commit: bool = True) -> None:
        self.scheduler.end_step(batch, commit=commit)

    def check_tokens(self, seqs: list[int], tokens: list[list[int]]) -> None:
        """Token ids must index the model's embedding tables (the per-layer-input table too)."""
        vocab = self.args.vocab_size
        if self.model.ple_dim:
            vocab = min(vocab, self.args.vocab_size_per_layer_input)
        check_token_ids(seqs, tokens, vocab)

    # -------------------------------------------------------------- the forward path
    @torch.inference_mode()
    def extend(self, seqs: list[int], tokens: list[list[int]], *, all_logits: bool = False,
               kv_amax: dict | None = None, mm_spans: list[list[tuple[int, int]]] | None = None,
               commit: bool = True) -> torch.Tensor | list[torch.Tensor]:
        """Append tokens[i] to sequence seqs[i] (new sequences start empty); run one forward.

        mm_spans[i]: image spans [start, end) (absolute token positions) of sequence i inside the tokens
        appended now; they stay attached to the sequence for its later steps. commit=False: the tokens
        are pending (see `commit`). Returns the last-token logits [B, V], or with all_logits a list of
        [len_i, V].
        """
        hidden, qlens = self.extend_hidden(seqs, tokens, kv_amax=kv_amax, mm_spans=mm_spans, commit=commit)
        if all_logits:
            return list(self.runner.logits(hidden).split(qlens))
        last = torch.tensor(qlens).cumsum(0) - 1
        return self.runner.logits(hidden[last.to(self.device)])

    @torch.inference_mode()
    def extend_hidden(self, seqs: list[int], tokens: list[list[int]], *, kv_amax: dict | None = None,
                      mm_spans: list[list[tuple[int, int]]] | None = None,
                      commit: bool = True) -> tuple[torch.Tensor, list[int]]:
        """`extend`'s forward: the final-normed hidden states of every new token [sum n_i, H], and n_i."""
        if len(seqs) != len(tokens) or any(len(t) == 0 for t in tokens):
            raise ValueError("extend needs one non-empty token list per sequence")
        self.check_tokens(seqs, tokens)
        batch = self.begin_step(seqs, [len(t) for t in tokens])
        if mm_spans is not None:
            self.scheduler.add_spans(batch, mm_spans)
        hidden = None
        if kv_amax is None and commit and len(seqs) == 1 and batch.qlens[0] > 1:
            hidden = None if self.sequences[seqs[0]].mm_spans else self.prefill_graphs.hidden(
                seqs[0], batch.starts[0], tokens[0])
        if hidden is None:
            hidden = self.runner.forward(batch, tokens, self.sequences.spans(), kv_amax=kv_amax)
        self.end_step(batch, commit=commit)
        return hidden, batch.qlens

    def prefill(self, seqs: list[int], prompts: list[list[int]],
                mm_spans: list[list[tuple[int, int]]] | None = None) -> torch.Tensor:
        """`extend` with whole prompts, in steps of at most max_step_tokens per sequence (an image span
        is never cut: a chunk ends before it, or takes it whole). Returns the last-token logits [B, V]."""
        if not self.max_step_tokens or max(map(len, prompts)) <= self.max_step_tokens:
            return self.extend(seqs, prompts, mm_spans=mm_spans)
        base = [self.sequences.length(s) for s in seqs]
        spans = mm_spans or [[] for _ in seqs]
        cuts = [chunk_ends(len(p), b, sp, self.max_step_tokens) for p, b, sp in zip(prompts, base, spans)]
        last: dict[int, torch.Tensor] = {}
        done = [0] * len(seqs)
        for step in range(max(map(len, cuts))):
            idx = [i for i in range(len(seqs)) if step < len(cuts[i])]
            toks = [prompts[i][done[i]:cuts[i][step]] for i in idx]
            step_spans = [[(a, e) for a, e in spans[i] if base[i] + done[i] <= a < base[i] + cuts[i][step]]
                          for i in idx] if mm_spans is not None else None
            logits = self.extend([seqs[i] for i in idx], toks, mm_spans=step_spans)
            for r, i in enumerate(idx):
                done[i] = cuts[i][step]
                last[i] = logits[r]
        return torch.stack([last[i] for i in range(len(seqs))])

    @torch.inference_mode()  # graphs captured by generate() hold inference tensors
    def decode(self, seqs: list[int], tokens: list[int] | torch.Tensor) -> torch.Tensor:
        """One decode step: tokens[i] (a host list or a device tensor) appended to seqs[i]. Returns [B, V]."""
        if not isinstance(tokens, torch.Tensor):
            self.check_tokens(seqs, [[t] for t in tokens])
        return self.decode_step(seqs, tokens).clone()

    def decode_step(self, seqs: list[int], tokens) -> torch.Tensor:
        """`decode` without the copy: a graph's logits are valid until its next replay."""
        out = self.decode_graphs.logits(seqs, tokens)
        if out is not None:
            return out
        host = tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens
        return self.extend(seqs, [[t] for t in host])

    def note_fallback(self, what: str, e: Exception) -> None:
        """A captured path that failed and now runs eager: a warning, and a note in the next results."""
        msg = f"{what} disabled ({type(e).__name__}: {e}); running eager"
        warnings.warn(msg)
        self.notes.append(msg)

    # -------------------------------------------------------------- calibration
    @torch.inference_mode()
    def calibrate(self, prompts: list[list[int]]) -> dict[int, tuple[float, float]]:
        """Calibrated FP8 scales: prefill `prompts` with a model-dtype cache on TORCH_REFERENCE,
        take amax |K| and |V| per KV-producing layer, scale = amax / fp8_max. Sets and returns them."""
        fp8 = {g.dtype for g in self.cache.groups.values() if g.fp8}
        if not fp8:
            raise ValueError("calibration needs an FP8 kv cache")
        mdt = dtype_name(self.model.dtype)
        plain = {k: g.model_copy(update=dict(kv_cache_dtype=mdt, descale="none", kv_scales="none"))
                 for k, g in reference_groups(self.groups).items()}
        calib = Engine(self.model, plain, EngineConfig(max_seqs=len(prompts), max_seq_len=max(map(len, prompts)),
                                                       device=self.device, cuda_graphs=False))
        amax: dict = {}
        calib.extend(list(range(len(prompts))), prompts, kv_amax=amax)
        scales = {}
        for kind, gc in self.cache.groups.items():
            scales |= scales_from_amax({i: amax[i] for i in gc.producers}, gc.dtype)
        self.cache.set_scales(scales)
        return scales

    # -------------------------------------------------------------- generation
    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int = 16,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        seed: int = 0,
        eos_token_id: int | None = None,
        stop_at_eos: bool = True,
        return_logits: bool = False,
        forced: list[list[int]] | None = None,
        mm_spans: list[list[tuple[int, int]]] | None = None,
    ) -> GenerationResult:
        """Generate for a batch: gemma4/generate.py's loop with `PlainDecoding` (all sequences decode in lock step;
        tokens stay on the device until the end). `forced`: teacher-force these continuations instead of sampling
        (the numerics check replays a run on another backend). `mm_spans`: image spans per prompt (see `extend`);
        decode steps are causal (they lie after every span)."""
        plain = PlainDecoding(self, forced=forced, return_logits=return_logits)
        return generation_loop(self, plain, prompts, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed,
                               eos_token_id=eos_token_id, stop_at_eos=stop_at_eos, mm_spans=mm_spans)


def attention_backends(groups: dict[str, GroupSelection], given: dict[str, AttentionBackend] | None):
    """The attention backend of each layer type, and its prefill backend: per phase (objective selections) a
    group's prefill steps may run another backend over the same paged cache (the selector made its kv block and
    dtype agree); decode steps and graphs use the first."""
    backends = given or {kind: make_backend(g) for kind, g in groups.items()}
    prefill = {kind: make_backend(g.prefill) if g.prefill is not None and given is None else backends[kind]
               for kind, g in groups.items()}
    return backends, prefill


def chunk_ends(n: int, base: int, spans: list[tuple[int, int]], size: int) -> list[int]:
    """Ends (prompt offsets) of the prefill steps of an n-token prompt that starts at position `base`:
    at most `size` tokens each, except that a chunk never ends inside an image span (it ends before
    the span, or, when the span starts the chunk, takes it whole)."""
    ends, at = [], 0
    while at < n:
        end = min(n, at + size)
        for a, e in sorted(spans):
            a, e = a - base, e - base
            if a < end < e:  # would cut the span
                if a <= at and e - a > size:
                    raise ValueError(f"an image span of {e - a} tokens > max_step_tokens={size}: a "
                                     "bidirectional span is prefilled in one step")
                end = a if a > at else min(n, e)
                break
        ends.append(end)
        at = end
    return ends


__all__ = ["Engine", "EngineConfig", "MultimodalUnsupportedError", "GenerationResult", "reference_groups",
           "model_groups",
           "sample", "max_rel_error", "chunk_ends", "Clock"]
