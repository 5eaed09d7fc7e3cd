"""Per-layer attention constants, the one type the backends (base.py) and their shared helpers
(common.py) both take; it imports nothing else of kselect."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerParams:
    """Per-layer attention constants."""

    softmax_scale: float
    window_left: int = -1  # FlashAttention (window_left, 0); -1 = full attention
    sinks: torch.Tensor | None = None  # [num_q_heads] fp32 learnable sink logits
    # FP8 cache descales (dequant = stored * scale), fp32 scalars or [B, num_kv_heads]
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None
    q_scale: torch.Tensor | None = None  # quant-query path: q_fp8 = q / q_scale
    # the model dtype (the output's): set where q may arrive already quantized (AttentionBackend.query_scale)
    out_dtype: torch.dtype | None = None
