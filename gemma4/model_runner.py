"""The model runner: turns a step (which sequences append which tokens where) into attention
metadata over the paged cache and runs the model, eagerly or from CUDA-graph static buffers.

It owns no sequence state (gemma4/engine.py does) and no allocation policy (gemma4/block_manager.py):
it reads the block tables the cache holds. Eager steps (`forward`) build metadata on the host; a
captured step (`static_forward`) reads positions and tables from device buffers the graph owns
and computes its cache slots on the device, with the model's capture-safe code paths.

Vision mode (`spans`, HF `use_bidirectional_attention="vision"`): per sequence, [start, end) token
ranges of image placeholders. As in HF, only sliding-attention layers see them (full-attention
layers stay causal): a span query sees the span's later tokens too, limited on the past side only by
the window (key > query - W), which every backend does itself (kernels/reference.py). They reach the
backend as `AttentionMetadata.mm_prefix` of the sliding group.
"""

from __future__ import annotations

import torch

from ..backends.base import AttentionBackend, AttentionMetadata
from .config import SLIDING
from .kv_cache import LAYER_TYPE_TO_GROUP, PagedKVCache
from .model import Gemma4, GroupStep, StepContext
from .sequence import StepBatch


class MultimodalUnsupportedError(RuntimeError):
    """Image spans were given but a selected backend has no mm-prefix (bidirectional span) support."""


class ModelRunner:
    def __init__(self, model: Gemma4, cache: PagedKVCache, backends: dict[str, AttentionBackend], groups: dict,
                 device: torch.device, prefill_backends: dict[str, AttentionBackend] | None = None):
        self.model, self.cache, self.backends, self.groups, self.device = model, cache, backends, groups, device
        # eager steps with more than one query token per sequence (prefill, chunks, verify passes) run here
        # (per-phase selections); decode steps and captured graphs run `backends`
        self.prefill_backends = prefill_backends or backends
        self.static_paths = False  # tests: run the CUDA-graph-safe code paths eagerly (e.g. on CPU)

    # -------------------------------------------------------------- metadata
    def metadata(self, batch: StepBatch, spans: dict[int, list[tuple[int, int]]] | None = None,
                 width: int | None = None) -> tuple[dict[str, AttentionMetadata], dict[str, torch.Tensor]]:
        """Per group: the step's attention metadata and the flat cache slots of its new tokens."""
        dev, seqs, qlens, kvlens = self.device, batch.seqs, batch.qlens, batch.kvlens
        spans = spans or {}
        # only spans holding a query of this step change anything (decode steps lie after every span)
        live = [[(a, e) for a, e in spans.get(s, []) if e > k - q] for s, q, k in zip(seqs, qlens, kvlens)]
        n_spans = max(map(len, live), default=0)
        mm = None
        if n_spans:  # [B, S, 2] absolute [start, end), padded with -1
            mm = torch.full((len(seqs), n_spans, 2), -1, dtype=torch.int32)
            for i, sp in enumerate(live):
                if sp:
                    mm[i, :len(sp)] = torch.tensor(sp, dtype=torch.int32)
            mm = mm.to(dev)
        cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(qlens, dtype=torch.int32), 0)
        used = torch.tensor(kvlens, dtype=torch.int32)
        metas, slots = {}, {}
        for kind, gc in self.cache.groups.items():
            bt = gc.block_table(seqs, width)
            metas[kind] = AttentionMetadata(
                cu_seqlens_q=cu.to(dev), seqused_k=used.to(dev), block_table=bt.to(dev),
                max_seqlen_q=max(qlens), max_seqlen_k=max(kvlens),
                mm_prefix=mm if kind == SLIDING else None,  # HF: full-attention layers stay causal
                host=(cu, used, bt))
            slots[kind] = gc.slot_mapping(seqs, batch.starts, qlens).to(dev)
        return metas, slots

    def context(self, positions: torch.Tensor, metas: dict, slots: dict, *, static: bool = False,
                kv_amax: dict | None = None, prefill: bool = False) -> StepContext:
        """The model's step context. `static`: the capture-safe code paths (no host syncs); `prefill`:
        the groups' prefill backends (per-phase selections)."""
        bes = self.prefill_backends if prefill else self.backends
        groups = {k: GroupStep(self.cache.groups[k], bes[k], metas[k], slots[k]) for k in metas}
        return StepContext(positions=positions, groups=groups, kv_amax=kv_amax, static=static or self.static_paths)

    # -------------------------------------------------------------- forwards
    def forward(self, batch: StepBatch, tokens: list[list[int]], spans: dict | None = None,
                kv_amax: dict | None = None) -> torch.Tensor:
        """Eager step: write the new tokens' K/V, return their final-normed hidden states [sum n_i, H]."""
        ids = torch.tensor([t for ts in tokens for t in ts], dtype=torch.long, device=self.device)
        pos = torch.cat([torch.arange(p, p + n) for p, n in zip(batch.starts, batch.qlens)]).to(self.device)
        metas, slots = self.metadata(batch, spans)
        ctx = self.context(pos, metas, slots, kv_amax=kv_amax, prefill=max(batch.qlens) > 1)
        try:
            return self.model(ids, ctx)
        except NotImplementedError as e:  # e.g. FLASH_ATTN adapters: no mm-prefix spans, never go causal
            if metas.get(SLIDING) is None or metas[SLIDING].mm_prefix is None:
                raise
            g = self.groups[SLIDING]
            raise MultimodalUnsupportedError(
                f"image spans need bidirectional mm-prefix attention, which the backend selected for "
                f"{LAYER_TYPE_TO_GROUP[SLIDING]} ({g.backend}) cannot do: {e}") from e

    def static_forward(self, ids: torch.Tensor, positions: torch.Tensor, metas: dict,
                       slots: dict) -> torch.Tensor:
        """A capture-safe step from static device buffers: `slots` are filled here from `positions`
        and each group's block table, then the model runs its static code paths. Hidden [T, H]."""
        for k, gc in self.cache.groups.items():  # every sequence has as many tokens
            table, bs = metas[k].block_table, gc.block_size
            if positions.is_cuda:  # one kernel a group (Triton: imported here, a GPU-only dependency)
                from ..kernels.slot_mapping import slot_mapping

                slot_mapping(positions, table, bs, slots[k])
                continue
            seq_of = torch.arange(positions.numel(), device=positions.device) // (positions.numel() // table.shape[0])
            slots[k].copy_(table[seq_of, torch.div(positions, bs, rounding_mode="floor")].long() * bs + positions % bs)
        return self.model(ids, self.context(positions, metas, slots, static=True))

    def padded_forward(self, ids: torch.Tensor, positions: torch.Tensor, metas: dict, slots: dict) -> torch.Tensor:
        """A captured prefill step (gemma4/graphs.py) from static buffers, on the prefill backends:
        slots come filled (-1 for pad rows). Capture-safe on CUDA, where the cache-write kernel skips pad
        rows itself; on CPU (graphs emulated in tests) the eager write drops them. Hidden [T, H]."""
        static = positions.device.type == "cuda"
        return self.model(ids, self.context(positions, metas, slots, static=static, prefill=True))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.compute_logits(hidden)

    def prepare_replay(self, metas: dict, seqused: list[int], tables: dict[str, torch.Tensor], *,
                       prefill: bool = False) -> None:
        """Backends that plan on the host (FLASHINFER) re-plan for the values in a graph's static buffers."""
        for k, be in (self.prefill_backends if prefill else self.backends).items():
            be.prepare_replay(metas[k], seqused, tables[k])
