"""The drafter's view of the target's paged KV cache: which target layer each draft layer type reads, on which
backend and with which K/V scales (`DraftKVBinding`), and the draft groups of a selection (`draft_groups_of`)."""

from __future__ import annotations

import torch

from ..backends.base import AttentionBackend, AttentionMetadata, LayerParams
from .config import FULL, SLIDING, DrafterArgs, DrafterError, Gemma4Args, target_kv_layer
from .drafter import DraftContext, DraftGroupStep
from ..kernels.dtypes import dtype_name
from ..selector.config.vocab import is_fp8


class DraftKVBinding:
    """Wires each draft layer type to the target's paged cache (same tensors, same block tables),
    on the draft group's backend, with the K/V scales the selection says (`copied_from_target` or
    the drafter's own `unit` scales).

    `kv_view` picks which cached positions a draft step reads:
      committed  the target's accepted tokens only (positions < P): full layers all of them,
                 sliding layers the last W+1. The default.
      hf         HF transformers 5.x assisted generation, bit for bit: its drafter reads the
                 `shared_kv_states` of the *last verification pass*, rejected drafts included
                 (full layers: positions <= P, i.e. the rejected slot at P when there was a
                 rejection; sliding layers: the last W+1 positions the pass wrote). The rejected
                 K/V are still in our cache slots (rollback only moves the sequence length), so
                 the same reads are possible. Used by the HF parity test.
    """

    def __init__(self, target_args: Gemma4Args, dargs: DrafterArgs, cache, draft_groups: dict,
                 target_groups: dict | None = None, backends: dict[str, AttentionBackend] | None = None,
                 copy_scales: bool | None = None, kv_view: str = "committed"):
        from ..backends.registry import make_backend

        if kv_view not in ("committed", "hf"):
            raise ValueError(f"kv_view must be 'committed' or 'hf', got {kv_view!r}")
        dargs.check_target(target_args)
        self.kv_view = kv_view
        self.cache = cache
        self.kinds = sorted(set(dargs.layer_types))
        self.layer: dict[str, int] = {}
        self.params: dict[str, LayerParams] = {}
        self.backends: dict[str, AttentionBackend] = {}
        self.scales_mode: dict[str, str] = {}
        for kind in self.kinds:
            src = target_kv_layer(target_args, kind)
            gc = cache.groups[kind]
            if src not in gc.k:
                raise DrafterError(f"target layer {src} owns no {kind} cache")
            g = draft_groups.get(kind)
            if g is None:
                raise DrafterError(f"the selection has no draft group for the drafter's {kind} layers")
            if g.reads_from and tuple(g.reads_from) != (src,):
                raise DrafterError(f"draft {g.kind} group reads_from={g.reads_from} but the last non-shared "
                                   f"{kind} target layer is {src}")
            if g.kv_block_size != gc.block_size or g.kv_cache_dtype != _kv_name(gc):
                raise DrafterError(f"draft {g.kind} group (kv block {g.kv_block_size}, {g.kv_cache_dtype}) does not "
                                   f"match the target cache it reads (kv block {gc.block_size}, {_kv_name(gc)})")
            tg = (target_groups or {}).get(kind)
            if tg is not None and (tg.backend, tg.flash_attn_version) != (g.backend, g.flash_attn_version):
                raise DrafterError(f"draft {g.kind} group runs {g.backend} v{g.flash_attn_version} but the target's "
                                   f"runs {tg.backend} v{tg.flash_attn_version}: the drafter must use the target's backend")
            self.layer[kind] = src
            self.backends[kind] = (backends or {}).get(kind) or make_backend(g)
            copy = copy_scales if copy_scales is not None else g.kv_scales == "copied_from_target"
            window = dargs.sliding_window if kind == SLIDING else -1
            p = LayerParams(softmax_scale=1.0, window_left=window)
            if gc.fp8:
                if copy:  # the very tensors the target dequantizes with (calibration updates them in place)
                    p.k_scale, p.v_scale = gc.k_scale[src], gc.v_scale[src]
                else:  # the drafter's own scales: 1.0 (assistant checkpoints ship none)
                    one = torch.ones((), dtype=torch.float32, device=gc.device)
                    p.k_scale, p.v_scale = one, one.clone()
                self.scales_mode[kind] = "copied_from_target" if copy else "unit"
            else:
                self.scales_mode[kind] = "none"
            self.params[kind] = p

    def used(self, kind: str, positions: list[int], written: list[int]) -> list[int]:
        """Cached tokens a draft step of a `kind` layer reads, per sequence (see `kv_view`)."""
        if self.kv_view == "committed":
            return list(positions)
        if kind == FULL:
            return [min(p + 1, w) for p, w in zip(positions, written)]
        return list(written)

    def context(self, seqs: list[int], positions: list[int], written: list[int], device) -> DraftContext:
        """Metadata for one draft step: sequence seqs[i] drafts at positions[i] (= its committed
        length P); `written[i]` = positions its last target pass wrote (>= P; only the hf view reads it)."""
        b = len(seqs)
        cu = torch.arange(b + 1, dtype=torch.int32, device=device)
        metas = {}
        for kind in self.kinds:
            used = self.used(kind, positions, written)
            metas[kind] = AttentionMetadata(
                cu_seqlens_q=cu, seqused_k=torch.tensor(used, dtype=torch.int32, device=device),
                block_table=self.cache.groups[kind].block_table(seqs).to(device),
                max_seqlen_q=1, max_seqlen_k=max(used))
        return self.static_context(torch.tensor(positions, dtype=torch.long, device=device), metas)

    def static_context(self, positions: torch.Tensor, metas: dict[str, AttentionMetadata]) -> DraftContext:
        """A draft context over given metadata (a CUDA graph's static buffers, or one step's)."""
        groups = {}
        for kind in self.kinds:
            k, v = self.cache.groups[kind].kv(self.layer[kind])
            groups[kind] = DraftGroupStep(k, v, self.backends[kind], metas[kind], self.params[kind])
        return DraftContext(positions=positions, groups=groups)


def _kv_name(gc) -> str:
    return dtype_name(gc.dtype)


def draft_groups_of(selection, target_groups: dict, *, copy_scales: bool | None = None) -> dict:
    """The draft groups of a selection keyed by layer type; derived from the target groups (same
    backend, block and KV dtype; `draft=True`) when the selection has none (hand-made selections)."""
    from .kv_cache import GROUP_TO_LAYER_TYPE

    groups = getattr(selection, "groups", None) or ()
    out = {GROUP_TO_LAYER_TYPE[g.kind]: g for g in groups if g.draft}
    if out:
        return out
    for kind, g in target_groups.items():
        fp8 = is_fp8(g.kv_cache_dtype)
        scales = ("copied_from_target" if copy_scales else "unit") if fp8 else "none"
        out[kind] = g.model_copy(update=dict(draft=True, reads_from=(), kv_scales=scales))
    return out
