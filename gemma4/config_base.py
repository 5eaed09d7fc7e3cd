"""What the model's and the drafter's arguments share (config.py) with their Hugging Face config.json form
(hf_config.py): the layer kinds, the model dtypes, the drafter's error."""

from __future__ import annotations

import torch

from ..kernels.dtypes import TORCH_DTYPES, is_fp8
from ..kernels.dtypes import torch_dtype as kernel_torch_dtype
from ..selector.config.vocab import LAYER_TYPE

SLIDING = LAYER_TYPE["sliding_window"]
FULL = LAYER_TYPE["full_attention"]

MODEL_DTYPES = frozenset(n for n, d in TORCH_DTYPES.items() if not is_fp8(d))  # names a model may use


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """A model dtype (kernels/dtypes.py's names, FP8 excluded: FP8 is a cache dtype only)."""
    dtype = kernel_torch_dtype(name)
    if is_fp8(dtype):
        raise ValueError(f"unsupported model dtype {name!r}; FP8 is a KV-cache dtype, not a model dtype")
    return dtype


def derive_layer_types(num_layers: int, full_every: int | None) -> list[str]:
    """Layer i is full when (i+1) % full_every == 0; the last layer is always full."""
    if not full_every or full_every <= 0:
        types = [SLIDING] * num_layers
    else:
        types = [FULL if (i + 1) % full_every == 0 else SLIDING for i in range(num_layers)]
    if types:
        types[-1] = FULL
    return types


class DrafterError(ValueError):
    """A drafter config or checkpoint that does not fit its target (or is not a Gemma-4 assistant)."""
