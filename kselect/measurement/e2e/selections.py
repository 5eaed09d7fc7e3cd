"""A resolved selection's groups as the report shows them, their identity (two selections that resolve to the same
groups are measured once) and the KV-cache capacity they give in a fixed budget."""

from __future__ import annotations

import math

import torch

from kselect.gemma4.kv_cache import group_blocks, kv_torch_dtype


def describe(groups) -> dict:
    out = {}
    for g in groups.values():
        out[g.kind] = dict(backend=g.label, kernel_block=g.kernel_block_size, kv_block=g.kv_block_size,
                           kv_dtype=g.kv_cache_dtype, quant_query=g.quant_query, descale=g.descale,
                           head_size=g.head_size, kv_heads=g.num_kv_heads, layers=len(g.layers))
        if g.prefill is not None:  # objective selections: prefill on another backend over the same cache
            p = g.prefill
            out[g.kind]["prefill_backend"] = p.label
    return out


def signature(groups) -> tuple:
    return tuple(sorted((k, g.backend, g.flash_attn_version, g.build, g.kernel_block_size, g.kv_block_size, g.kv_cache_dtype,
                         g.quant_query, g.descale, g.kv_scales,
                         signature({k: g.prefill}) if g.prefill is not None else None) for k, g in groups.items()))


def capacity(args, groups, model_dtype, budget_gib: float, prefill_chunk: int = 2048) -> dict:
    """Tokens per sequence-independent pool that fit in budget_gib: every group holds every token
    (full-length paged cache, as PagedKVCache allocates), rounded down to whole kv blocks. Also
    `one_sequence_windowed`: the longest single sequence that fits when prompts prefill in chunks of
    `prefill_chunk` (Engine max_step_tokens), so the sliding group holds only its window."""
    per, blocks = {}, []
    for g in groups.values():
        producers = [i for i in g.layers if not args.is_kv_shared(i)]
        elem = torch.empty((), dtype=kv_torch_dtype(g.kv_cache_dtype, model_dtype)).element_size()
        per[g.kind] = dict(producer_layers=len(producers),
                           bytes_per_token=len(producers) * 2 * g.num_kv_heads * g.head_size * elem,
                           kv_block=g.kv_block_size)
        blocks.append(g.kv_block_size)
    total = sum(p["bytes_per_token"] for p in per.values())
    step = math.lcm(*blocks)
    budget = budget_gib * 2**30
    tokens = int(budget // total) // step * step
    while tokens and sum(math.ceil(tokens / p["kv_block"]) * p["kv_block"] * p["bytes_per_token"]
                         for p in per.values()) > budget:
        tokens -= step

    def windowed_bytes(n):  # PagedKVCache's pools for one sequence of n tokens, chunked prefill
        return sum(group_blocks(p["kv_block"], n, 1, args.sliding_window if k == "sliding_window" else None,
                                prefill_chunk) * p["kv_block"] * p["bytes_per_token"] for k, p in per.items())

    lo, hi = 0, 1 << 40  # the largest block multiple that fits: bytes grow with n
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if windowed_bytes(mid) <= budget else (lo, mid)
    return dict(budget_gib=budget_gib, bytes_per_token=total, tokens=tokens, groups=per,
                one_sequence_windowed=dict(prefill_chunk=prefill_chunk, tokens=lo))
