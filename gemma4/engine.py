"""Batched generation over the paged KV cache, each group's attention on its selected backend.

`Engine.extend(seqs, tokens)` is the one forward path: it appends tokens to sequences (a prompt
for prefill, one token for decode, several for chunked prefill), writes their K/V into the paged
caches and returns logits. `generate` does greedy or seeded temperature/top-k sampling over a
batch and reports prefill and decode tokens/s. On CUDA, decode runs as a CUDA graph when every
group's backend `supports_cuda_graphs()` (checked against an eager step at capture time; any
mismatch or capture error falls back to eager with a warning). With graphs, `generate` keeps the
tokens on the device (the graph computes cache slots from its positions and block tables), so the
decode loop has no per-step host sync (an EOS check every `EOS_CHECK_EVERY` steps); its times are
CUDA events. A captured graph is kept across `reset()` (static inputs are reloaded before use).

Vision mode (`mm_spans`, HF `use_bidirectional_attention="vision"`): per sequence, [start, end)
token ranges of image placeholders, given with the step that prefills them (a span must lie wholly
inside one step) and kept for the sequence's later steps. As in HF, only sliding-attention layers
see them (full-attention layers stay causal): a span query sees the span's later tokens too, limited
on the past side only by the window (key > query - W). They reach the backend as
`AttentionMetadata.mm_prefix` of the sliding group.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import torch

from kselect.backends.base import AttentionBackend, AttentionMetadata
from kselect.backends.registry import make_backend
from kselect.gemma4.config import FULL, SLIDING, Gemma4Args
from kselect.gemma4.decode_graph import DecodeGraph
from kselect.gemma4.kv_cache import GROUP_TO_LAYER_TYPE, LAYER_TYPE_TO_GROUP, PagedKVCache, scales_from_amax
from kselect.gemma4.model import Gemma4, GroupStep, StepContext
from kselect.selector.selection import GroupSelection, Selection

_DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
EOS_CHECK_EVERY = 16  # graph decode: steps between host-side "all sequences finished?" checks


# ---------------------------------------------------------------------------- selections


def model_groups(selection: Selection | dict) -> dict[str, GroupSelection]:
    """The target (non-draft) groups of a selection, keyed by layer type."""
    if isinstance(selection, dict):
        return dict(selection)
    return {GROUP_TO_LAYER_TYPE[g.kind]: g for g in selection.groups if not g.draft}


def simple_selection(
    args: Gemma4Args,
    *,
    backend: str = "TORCH_REFERENCE",
    kv_block_size: int | dict[str, int] = 16,
    kv_cache_dtype: str = "auto",
    kv_scales: str = "unit",
    kernel_block_size: int | dict[str, int] | None = None,
) -> Selection:
    """A hand-made selection (tests, the numerics reference): same backend for every group.

    `kv_block_size` / `kernel_block_size` may be given per layer type ({sliding_attention: 16, ...}).
    """
    kv_name = _DTYPE_NAME[args.torch_dtype] if kv_cache_dtype in (None, "auto") else kv_cache_dtype
    fp8 = kv_name.startswith("fp8")
    groups = []
    for kind in (SLIDING, FULL):
        layers = args.layers_of(kind)
        if not layers:
            continue
        bs = kv_block_size[kind] if isinstance(kv_block_size, dict) else kv_block_size
        kb = kernel_block_size[kind] if isinstance(kernel_block_size, dict) else kernel_block_size
        groups.append(GroupSelection(
            kind=LAYER_TYPE_TO_GROUP[kind],
            layers=tuple(layers),
            reads_from=tuple(sorted({args.kv_source(i) for i in layers if args.is_kv_shared(i)})),
            head_size=args.layer_head_dim(layers[0]),
            num_kv_heads=args.num_kv_heads(layers[0]),
            sliding_window=args.sliding_window if kind == SLIDING else None,
            backend=backend,
            flash_attn_version=None,
            kernel_block_size=kb or bs,
            kv_block_size=bs,
            kv_cache_dtype=kv_name,
            quant_query=False,
            descale="k_v" if fp8 else "none",
            kv_scales=kv_scales if fp8 else "none",
            mm_prefix=False,
        ))
    bs0 = min(g.kv_block_size for g in groups)
    return Selection(environment={"platform": "manual", "model": args.name}, block_size=bs0, groups=tuple(groups))


def reference_groups(groups: dict[str, GroupSelection]) -> dict[str, GroupSelection]:
    """The same groups (block sizes, KV dtype) on the TORCH_REFERENCE backend."""
    out = {}
    for kind, g in groups.items():
        out[kind] = g.model_copy(update=dict(
            backend="TORCH_REFERENCE", flash_attn_version=None, kernel_block_size=g.kv_block_size,
            quant_query=False, descale="k_v" if g.kv_cache_dtype.startswith("fp8") else "none", prefill=None))
    return out


# ---------------------------------------------------------------------------- results


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


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int = 0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, V] -> [B] next tokens: argmax at temperature 0, else softmax(logits/T) over the top-k."""
    if temperature <= 0:
        return logits.argmax(-1)
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def max_rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (b is the reference)."""
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# ---------------------------------------------------------------------------- engine


class Engine:
    def __init__(
        self,
        model: Gemma4,
        selection: Selection | dict[str, GroupSelection],
        *,
        max_seqs: int = 8,
        max_seq_len: int = 512,
        device: torch.device | str | None = None,
        kv_scales: dict[int, tuple[float, float]] | None = None,
        cuda_graphs: bool | None = None,
        backends: dict[str, AttentionBackend] | None = None,
        max_step_tokens: int | None = None,
    ):
        """max_step_tokens: the most tokens one sequence may add in one forward; prompts longer than
        that are prefilled in chunks (`prefill`). It bounds the sliding-window cache per sequence
        to W - 1 + max_step_tokens tokens (None: prompts prefill whole, and that group is sized for
        every token)."""
        if max_step_tokens is not None and max_step_tokens < 1:
            raise ValueError(f"max_step_tokens must be a positive token count or None, got {max_step_tokens}")
        self.model = model.eval()
        self.args = model.args
        self.device = torch.device(device) if device is not None else model.device
        self.groups = model_groups(selection)
        self.backends = backends or {kind: make_backend(g) for kind, g in self.groups.items()}
        # per phase (objective selections): a group's prefill steps may run another backend over the same
        # paged cache (the selector made its kv block and dtype agree); decode steps and graphs use `backends`
        self.prefill_backends = {kind: make_backend(g.prefill) if g.prefill is not None and backends is None
                                 else self.backends[kind] for kind, g in self.groups.items()}
        self.max_seqs, self.max_seq_len, self.max_step_tokens = max_seqs, max_seq_len, max_step_tokens
        self.cache = PagedKVCache(self.args, self.groups, max_tokens=max_seqs * max_seq_len, device=self.device,
                                  model_dtype=model.dtype, max_seqs=max_seqs, step_tokens=max_step_tokens)
        if kv_scales:
            self.cache.set_scales(kv_scales)
        self.seq_lens: dict[int, int] = {}
        self.mm_spans: dict[int, list[tuple[int, int]]] = {}  # vision mode: image spans per sequence
        on_cuda = self.device.type == "cuda"
        graphable = all(b.supports_cuda_graphs() for b in self.backends.values())
        self.use_graphs = bool(on_cuda and graphable and (cuda_graphs is None or cuda_graphs))
        self._graphs: dict[int, DecodeGraph] = {}
        self._epoch = 0  # bumped by reset() and eager extends: a graph's device positions are stale
        self.notes: list[str] = []
        self.static_paths = False  # tests: run the CUDA-graph-safe code paths eagerly (e.g. on CPU)

    # -------------------------------------------------------------- bookkeeping
    def reset(self) -> None:
        self.cache.release_all()
        self.seq_lens.clear()
        self.mm_spans.clear()
        self._epoch += 1  # captured graphs stay; their static inputs are reloaded before the next replay

    def backend_names(self) -> dict[str, str]:
        out = {}
        for k, b in self.backends.items():
            g = self.groups[k]
            fa = f" v{g.flash_attn_version}" if g.flash_attn_version else ""
            build = f", {b.kernel_build}" if b.kernel_build else ""
            out[LAYER_TYPE_TO_GROUP[k]] = f"{g.backend}{fa} ({type(b).__name__}{build})"
            p = self.prefill_backends[k]
            if p is not b:
                pfa = f" v{g.prefill.flash_attn_version}" if g.prefill.flash_attn_version else ""
                out[LAYER_TYPE_TO_GROUP[k]] += f"; prefill {g.prefill.backend}{pfa} ({type(p).__name__})"
        return out

    def _metadata(self, seqs: list[int], qlens: list[int], kvlens: list[int], width: int | None = None):
        dev = self.device
        # only spans holding a query of this step change anything (decode steps lie after every span)
        spans = [[(a, e) for a, e in self.mm_spans.get(s, []) if e > k - q] for s, q, k in zip(seqs, qlens, kvlens)]
        n_spans = max(map(len, spans), default=0)
        mm = None
        if n_spans:  # [B, S, 2] absolute [start, end), padded with -1
            mm = torch.full((len(seqs), n_spans, 2), -1, dtype=torch.int32)
            for i, sp in enumerate(spans):
                if sp:
                    mm[i, :len(sp)] = torch.tensor(sp, dtype=torch.int32)
            mm = mm.to(dev)
        cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(qlens, dtype=torch.int32), 0)
        used = torch.tensor(kvlens, dtype=torch.int32)
        metas, slots = {}, {}
        starts = [k - q for k, q in zip(kvlens, qlens)]
        for kind, gc in self.cache.groups.items():
            bt = gc.block_table(seqs, width)
            metas[kind] = AttentionMetadata(
                cu_seqlens_q=cu.to(dev), seqused_k=used.to(dev), block_table=bt.to(dev),
                max_seqlen_q=max(qlens), max_seqlen_k=max(kvlens),
                mm_prefix=mm if kind == SLIDING else None)  # HF: full-attention layers stay causal
            slots[kind] = gc.slot_mapping(seqs, starts, qlens).to(dev)
        return metas, slots

    def _far_span_queries(self, seqs, qlens, starts, meta: AttentionMetadata) -> list:
        """Sliding group: image-span queries q with span end e > q + W (HF lets them see span keys up to
        e-1, the backend window stops at q + W-1). Each becomes one causal query at position e-1 (the
        bottom-right position of a 1-token query over e keys) with window_left = e-1 - (q-W+1): keys
        [q-W+1, e-1], exactly HF's set. Grouped by e - q (one backend call per group and sliding
        layer; none unless a span is longer than the window)."""
        w = self.args.sliding_window
        groups: dict[int, list[tuple[int, int, int]]] = {}
        row0 = 0
        for i, (s, n, p0) in enumerate(zip(seqs, qlens, starts)):
            for a, e in self.mm_spans.get(s, []):
                for qp in range(max(a, p0), min(e - w, p0 + n)):
                    groups.setdefault(e - qp, []).append((row0 + qp - p0, i, e))
            row0 += n
        out = []
        for d, items in sorted(groups.items()):
            rows = torch.tensor([r for r, _, _ in items], dtype=torch.long, device=self.device)
            ends = torch.tensor([e for _, _, e in items], dtype=torch.int32)
            bidx = torch.tensor([i for _, i, _ in items], dtype=torch.long, device=self.device)
            m = AttentionMetadata(
                cu_seqlens_q=torch.arange(len(items) + 1, dtype=torch.int32).to(self.device),
                seqused_k=ends.to(self.device), block_table=meta.block_table[bidx], max_seqlen_q=1,
                max_seqlen_k=int(ends.max()))
            out.append((rows, m, d + w - 2))
        return out

    def _context(self, positions, metas, slots, kv_amax=None, prefill: bool = False) -> StepContext:
        bes = self.prefill_backends if prefill else self.backends
        groups = {k: GroupStep(self.cache.groups[k], bes[k], metas[k], slots[k]) for k in metas}
        ctx = StepContext(positions=positions, groups=groups, kv_amax=kv_amax)
        if self.static_paths:
            ctx.extra["static"] = True
        return ctx

    # -------------------------------------------------------------- the forward path
    @torch.inference_mode()
    def extend(self, seqs: list[int], tokens: list[list[int]], *, all_logits: bool = False,
               kv_amax: dict | None = None,
               mm_spans: list[list[tuple[int, int]]] | None = None) -> torch.Tensor | list[torch.Tensor]:
        """Append tokens[i] to sequence seqs[i] (new sequences start empty); run one forward.

        mm_spans[i]: image spans [start, end) (absolute token positions) of sequence i inside the tokens
        appended now; they stay attached to the sequence for its later steps.
        Returns the last-token logits [B, V], or with all_logits a list of [len_i, V].
        """
        hidden, qlens = self.extend_hidden(seqs, tokens, kv_amax=kv_amax, mm_spans=mm_spans)
        if all_logits:
            return list(self.model.compute_logits(hidden).split(qlens))
        last = torch.tensor(qlens).cumsum(0) - 1
        return self.model.compute_logits(hidden[last.to(self.device)])

    @torch.inference_mode()
    def extend_hidden(self, seqs: list[int], tokens: list[list[int]], *, kv_amax: dict | None = None,
                      mm_spans: list[list[tuple[int, int]]] | None = None) -> tuple[torch.Tensor, list[int]]:
        """`extend`'s forward: the final-normed hidden states of every new token [sum n_i, H], and n_i."""
        if len(seqs) != len(tokens) or any(len(t) == 0 for t in tokens):
            raise ValueError("extend needs one non-empty token list per sequence")
        qlens = [len(t) for t in tokens]
        if self.max_step_tokens and max(qlens) > self.max_step_tokens:
            raise ValueError(f"a step of {max(qlens)} tokens for one sequence > max_step_tokens="
                             f"{self.max_step_tokens}: prefill long prompts with Engine.prefill (chunks)")
        starts = [self.seq_lens.get(s, 0) for s in seqs]
        kvlens = [p + n for p, n in zip(starts, qlens)]
        for s, p0, n in zip(seqs, starts, kvlens):
            if n > self.max_seq_len:
                raise ValueError(f"sequence {s} would have {n} tokens > max_seq_len={self.max_seq_len}")
            if s not in self.seq_lens and len(self.seq_lens) >= self.max_seqs:
                raise ValueError(f"more than max_seqs={self.max_seqs} sequences")
            self.cache.step(s, p0, n)
        if mm_spans is not None:
            self._add_spans(seqs, starts, kvlens, mm_spans)
        ids = torch.tensor([t for ts in tokens for t in ts], dtype=torch.long, device=self.device)
        pos = torch.cat([torch.arange(p, p + n) for p, n in zip(starts, qlens)]).to(self.device)
        metas, slots = self._metadata(seqs, qlens, kvlens)
        ctx = self._context(pos, metas, slots, kv_amax, prefill=max(qlens) > 1)
        if SLIDING in ctx.groups and metas[SLIDING].mm_prefix is not None:
            ctx.groups[SLIDING].far = self._far_span_queries(seqs, qlens, starts, metas[SLIDING])
        try:
            hidden = self.model(ids, ctx)
        except NotImplementedError as e:  # e.g. FLASH_ATTN adapters: no mm-prefix spans, never go causal
            if metas.get(SLIDING) is None or metas[SLIDING].mm_prefix is None:
                raise
            g = self.groups[SLIDING]
            raise MultimodalUnsupportedError(
                f"image spans need bidirectional mm-prefix attention, which the backend selected for "
                f"{LAYER_TYPE_TO_GROUP[SLIDING]} ({g.backend}) cannot do: {e}") from e
        self._epoch += 1
        for s, n in zip(seqs, kvlens):
            self.seq_lens[s] = n
        return hidden, qlens

    def _add_spans(self, seqs, starts, kvlens, mm_spans) -> None:
        if len(mm_spans) != len(seqs):
            raise ValueError("mm_spans needs one list of spans per sequence")
        for s, p0, n, sp in zip(seqs, starts, kvlens, mm_spans):
            sp = sorted((int(a), int(e)) for a, e in sp)
            for j, (a, e) in enumerate(sp):
                if not p0 <= a < e <= n:
                    raise ValueError(f"sequence {s}: image span [{a}, {e}) must lie inside the tokens of this "
                                     f"step [{p0}, {n}) (a bidirectional span is prefilled in one step)")
                if j and a < sp[j - 1][1]:
                    raise ValueError(f"sequence {s}: image spans {sp[j - 1]} and {(a, e)} overlap")
            if sp:
                self.mm_spans[s] = self.mm_spans.get(s, []) + sp

    def prefill(self, seqs: list[int], prompts: list[list[int]],
                mm_spans: list[list[tuple[int, int]]] | None = None) -> torch.Tensor:
        """`extend` with whole prompts, in steps of at most max_step_tokens per sequence (an image span
        is never cut: a chunk ends before it, or takes it whole). Returns the last-token logits [B, V]."""
        if not self.max_step_tokens or max(map(len, prompts)) <= self.max_step_tokens:
            return self.extend(seqs, prompts, mm_spans=mm_spans)
        base = [self.seq_lens.get(s, 0) for s in seqs]
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
    def decode(self, seqs: list[int], tokens: list[int]) -> torch.Tensor:
        """One decode step: tokens[i] appended to seqs[i]. Returns [B, V] logits."""
        out = self._try_graph(seqs, tokens)
        if out is not None:
            return out.clone()
        return self.extend(seqs, [[t] for t in tokens])

    def _try_graph(self, seqs: list[int], tokens) -> torch.Tensor | None:
        """The graph's logits (valid until its next replay), or None when graphs are off or fail."""
        if not self.use_graphs:
            return None
        try:
            return self._decode_graph(seqs, tokens)
        except Exception as e:  # capture problems must never change results: fall back
            self.use_graphs = False
            self._graphs.clear()
            msg = f"CUDA graph decode disabled ({type(e).__name__}: {e}); running eager"
            warnings.warn(msg)
            self.notes.append(msg)
            return None

    # -------------------------------------------------------------- calibration
    @torch.inference_mode()
    def calibrate(self, prompts: list[list[int]]) -> dict[int, tuple[float, float]]:
        """Calibrated FP8 scales: prefill `prompts` with a model-dtype cache on TORCH_REFERENCE,
        take amax |K| and |V| per KV-producing layer, scale = amax / fp8_max. Sets and returns them."""
        fp8 = {g.dtype for g in self.cache.groups.values() if g.fp8}
        if not fp8:
            raise ValueError("calibration needs an FP8 kv cache")
        mdt = _DTYPE_NAME[self.model.dtype]
        plain = {k: g.model_copy(update=dict(kv_cache_dtype=mdt, descale="none", kv_scales="none"))
                 for k, g in reference_groups(self.groups).items()}
        calib = Engine(self.model, plain, max_seqs=len(prompts), max_seq_len=max(map(len, prompts)),
                       device=self.device, cuda_graphs=False)
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
        """Generate for a batch. All sequences decode in lock step (finished ones keep a stable batch
        shape; their extra tokens are dropped). `forced`: teacher-force these continuations instead
        of sampling (the numerics check replays a run on another backend). `mm_spans`: image spans
        per prompt (see `extend`); decode steps are causal (they lie after every span)."""
        if len(prompts) > self.max_seqs:
            raise ValueError(f"{len(prompts)} prompts > max_seqs={self.max_seqs}")
        self.reset()
        eos = self.args.eos_token_id if eos_token_id is None else eos_token_id
        gen = torch.Generator(device=self.device).manual_seed(seed) if temperature > 0 else None
        seqs = list(range(len(prompts)))
        total = max(len(p) for p in prompts) + max_new_tokens
        if total > self.max_seq_len:
            raise ValueError(f"prompt + max_new_tokens = {total} > max_seq_len={self.max_seq_len}")
        for s, p in zip(seqs, prompts):  # reserve blocks up front: static block tables for graphs
            self.cache.reserve(s, len(p) + max_new_tokens)
        if self.use_graphs:
            return self._generate_on_device(seqs, prompts, max_new_tokens, temperature, top_k, gen, eos,
                                            stop_at_eos, return_logits, forced, mm_spans)
        logs: list[torch.Tensor] = []

        picked: list[list[int]] = []

        def pick(logits: torch.Tensor, step: int) -> list[int]:
            if return_logits:
                logs.append(logits.float().cpu())
            if forced is not None:
                toks = [f[step] for f in forced]
            else:
                toks = sample(logits, temperature, top_k, gen).tolist()
            picked.append(toks)
            return toks

        _sync(self.device)
        t0 = time.perf_counter()
        nxt = pick(self.prefill(seqs, prompts, mm_spans=mm_spans), 0)
        _sync(self.device)
        t1 = time.perf_counter()
        out = [[t] for t in nxt]
        done = [stop_at_eos and t == eos for t in nxt]
        steps = 0
        for step in range(1, max_new_tokens):
            if all(done):
                break
            nxt = pick(self.decode(seqs, nxt), step)
            steps += 1
            for i, t in enumerate(nxt):
                if not done[i]:
                    out[i].append(t)
                    done[i] = stop_at_eos and t == eos
        _sync(self.device)
        t2 = time.perf_counter()
        return GenerationResult(
            tokens=out, prompt_tokens=sum(map(len, prompts)), decode_tokens=steps * len(prompts),
            prefill_s=t1 - t0, decode_s=t2 - t1, logits=logs if return_logits else None, steps=picked,
            cuda_graphs=bool(self._graphs) and self.use_graphs, notes=list(self.notes))

    def _generate_on_device(self, seqs, prompts, max_new_tokens, temperature, top_k, gen, eos, stop_at_eos,
                            return_logits, forced, mm_spans=None) -> GenerationResult:
        """`generate` with graph decode: tokens (and logits) stay on the device until the end, so the
        loop never waits for the GPU except for an EOS check every EOS_CHECK_EVERY steps. Same tokens,
        EOS handling and `steps` as the host loop; decode_tokens counts the steps actually run."""
        dev = self.device
        forced_t = (torch.tensor(forced, dtype=torch.long).T.contiguous().to(dev)
                    if forced is not None else None)  # [steps, B]
        logs: list[torch.Tensor] = []
        toks: list[torch.Tensor] = []

        def pick(logits: torch.Tensor, step: int) -> torch.Tensor:
            if return_logits:
                logs.append(logits.to(torch.float32, copy=True))
            nxt = forced_t[step] if forced_t is not None else sample(logits, temperature, top_k, gen)
            toks.append(nxt)
            return nxt

        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
        nxt = pick(self.prefill(seqs, prompts, mm_spans=mm_spans), 0)
        ev[1].record()
        steps = 0
        for step in range(1, max_new_tokens):
            if stop_at_eos and step % EOS_CHECK_EVERY == 0 and bool((torch.stack(toks) == eos).any(0).all()):
                break
            logits = self._try_graph(seqs, nxt)
            if logits is None:  # graphs failed: eager (host tokens)
                logits = self.extend(seqs, [[t] for t in nxt.tolist()])
            nxt = pick(logits, step)
            steps += 1
        ev[2].record()
        torch.cuda.synchronize(dev)
        rows = torch.stack(toks).tolist()  # [1 + steps, B]
        out = [[t] for t in rows[0]]
        done = [stop_at_eos and t == eos for t in rows[0]]
        used = 1
        for row in rows[1:]:
            if all(done):
                break
            used += 1
            for i, t in enumerate(row):
                if not done[i]:
                    out[i].append(t)
                    done[i] = stop_at_eos and t == eos
        return GenerationResult(
            tokens=out, prompt_tokens=sum(map(len, prompts)), decode_tokens=steps * len(prompts),
            prefill_s=ev[0].elapsed_time(ev[1]) / 1e3, decode_s=ev[1].elapsed_time(ev[2]) / 1e3,
            logits=[x.cpu() for x in logs[:used]] if return_logits else None, steps=rows[:used],
            cuda_graphs=bool(self._graphs) and self.use_graphs, notes=list(self.notes))

    # -------------------------------------------------------------- CUDA graphs
    def _decode_graph(self, seqs: list[int], tokens) -> torch.Tensor:
        """tokens: host list or device tensor [B]. Returns the graph's output buffer (not a copy)."""
        b = len(seqs)
        g = self._graphs.get(b)
        starts = [self.seq_lens[s] for s in seqs]
        for s, p in zip(seqs, starts):
            if p + 1 > self.max_seq_len:
                raise ValueError(f"sequence {s} exceeds max_seq_len")
            self.cache.step(s, p, p + 1)
        if g is None or g.seqs != seqs:
            g = DecodeGraph(self, seqs)
            logits, replayed = g.capture(tokens, starts)
            err = max_rel_error(replayed, logits)
            if not math.isfinite(err) or err > 1e-3:
                raise RuntimeError(f"graph replay differs from the eager step (max rel err {err:.2e})")
            self._graphs[b] = g
        elif g.state == (self._epoch, starts) and not self._tables_changed(g):
            logits = g.advance(tokens)  # device-side +1 on positions/lengths: no host copies
        else:
            logits = g.replay(tokens, starts)
        for s, p in zip(seqs, starts):
            self.seq_lens[s] = p + 1
        g.state = (self._epoch, [p + 1 for p in starts])
        return logits

    def _tables_changed(self, g: DecodeGraph) -> bool:
        return g.table_version != self.cache.version() or any(
            len(gc.tables.get(s, ())) != g.table_lens[k][r] for k, gc in self.cache.groups.items()
            for r, s in enumerate(g.seqs))


class MultimodalUnsupportedError(RuntimeError):
    """Image spans were given but a selected backend has no mm-prefix (bidirectional span) support."""


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["Engine", "MultimodalUnsupportedError", "GenerationResult", "simple_selection", "reference_groups", "model_groups", "sample",
           "max_rel_error", "chunk_ends"]
