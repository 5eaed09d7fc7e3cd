"""Bidirectional mm-prefix spans on causal kernels: a second, non-causal pass over the span rows.

With a window W bounding the past side only (or none), query q inside span [s, e) may see keys
[q-W, e-1] (kernels/reference.py: causal keys, plus every later key of its span, as HF's Gemma-4 mask
and vLLM's unified_attention give it). That range is contiguous and ends at the span end, so the span's
query rows form one extra "sequence" whose KV is the first min(e, seqused_k) tokens of the same
block-table row: with FlashAttention's bottom-right alignment its rows sit exactly at positions
e_c - n .. e_c - 1, and a non-causal call with window (W, max_seqlen_k) gives each row exactly its keys.
Those rows are recomputed and overwrite the causal pass.
Rows outside spans are untouched; a step whose queries miss every span needs no second pass.

Host-side: reads mm_prefix, cu_seqlens_q and seqused_k once (a sync), so a step with spans is not
CUDA-graph capturable; the engine only passes spans to steps whose queries lie in them (prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import AttentionMetadata


@dataclass
class SpanPass:
    rows: torch.Tensor  # [n] int64: query rows (into q / out) inside a span
    meta: AttentionMetadata  # one sequence per (sequence, span) that has rows in this step
    batch_index: torch.Tensor  # [S] int64: the original sequence of each span sequence (for descales)


def span_pass(meta: AttentionMetadata) -> SpanPass | None:
    if meta.mm_prefix is None:
        return None
    if meta.q_positions is not None:
        raise NotImplementedError("mm_prefix spans with explicit q_positions are not supported")
    spans = meta.mm_prefix.cpu().tolist()
    cu = meta.cu_seqlens_q.cpu().tolist()
    used = meta.seqused_k.cpu().tolist()
    rows, q_lens, k_lens, seq = [], [], [], []
    for i, seq_spans in enumerate(spans):
        q_len = cu[i + 1] - cu[i]
        first = used[i] - q_len  # position of this step's first query
        for s, e in seq_spans:
            if s < 0:
                continue
            end = min(e, used[i])
            lo = max(s, first)
            if lo >= end:
                continue
            rows.extend(range(cu[i] + lo - first, cu[i] + end - first))
            q_lens.append(end - lo)
            k_lens.append(end)
            seq.append(i)
    if not rows:
        return None
    dev = meta.cu_seqlens_q.device
    cu_q = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    cu_q[1:] = torch.cumsum(torch.tensor(q_lens, dtype=torch.int32), 0)
    idx = torch.tensor(seq, dtype=torch.long, device=dev)
    sub = AttentionMetadata(cu_seqlens_q=cu_q.to(dev), seqused_k=torch.tensor(k_lens, dtype=torch.int32, device=dev),
                            block_table=meta.block_table[idx], max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens))
    return SpanPass(torch.tensor(rows, dtype=torch.long, device=dev), sub, idx)


def select_descale(d: torch.Tensor | None, batch_index: torch.Tensor) -> torch.Tensor | None:
    """A [B, Hkv] descale re-indexed to the span sequences; scalars pass through."""
    if d is None or d.numel() == 1:
        return d
    return d[batch_index]
