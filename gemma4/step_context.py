"""What one forward step carries besides the tokens: positions and, per KV-cache group, the paged cache,
the attention backend and its metadata (filled by gemma4/model_runner.py, read by gemma4/forward.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import AttentionBackend, AttentionMetadata
    from .kv_cache import GroupCache


@dataclass
class GroupStep:
    """One KV-cache group during one forward step."""

    cache: "GroupCache"
    backend: "AttentionBackend"
    meta: "AttentionMetadata"
    slot_mapping: torch.Tensor  # [T] int64 flat cache slots of the new tokens (-1 = padding)


@dataclass
class StepContext:
    positions: torch.Tensor  # [T] int64 absolute positions of the new tokens
    groups: dict[str, GroupStep]  # keyed by layer type: sliding_attention / full_attention
    # Calibration: when a dict, every KV-producing layer records (amax|K|, amax|V|) here.
    kv_amax: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    static: bool = False  # CUDA-graph-safe code paths: no host syncs (set by gemma4/model_runner.py)
