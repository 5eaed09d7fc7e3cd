"""Weights read with L2's evict-first policy, so the small data read again soon stays in L2.

Why: a decode step streams every weight once (9.3 GB a step for E4B), far more than L2 holds (50 MB on the H100),
and with the default policy that stream pushes everything else out of L2. The KV cache is small beside it (about
1 MB a layer at batch 1 and 512 tokens) and is read again by the next step, and by the KV-sharing layers within a
step. Marked evict-first, W's lines are the ones replaced first, so the cache and the activations can stay resident;
the attention then reads its keys from L2 (keys in L2 took 0.9-1.6 us off the attention pair alone:
bench/results/h200/attn_floor/).

On the GPU, `load_w` is `ld.global.L1::evict_first.L2::cache_hint` with an evict-first policy (Triton's
eviction_policy="evict_first"); the CPU interpreter ignores the hint. A hint changes no result.

W_EVICT_FIRST (off) is a measurement's switch (kselect/measurement/gemv_variants.py `w_evict`): no card has measured
it yet.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .switches import switched

W_EVICT_FIRST = False


def evict_first(on: bool):
    """W_EVICT_FIRST inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), W_EVICT_FIRST=bool(on))


def on(x: torch.Tensor) -> bool:
    """Whether a kernel reading W beside x marks W's loads evict-first: W_EVICT_FIRST, on the GPU only."""
    return W_EVICT_FIRST and x.is_cuda


@triton.jit
def load_w(ptrs, mask, EVICT_FIRST: tl.constexpr):
    """W's tile at ptrs (0 where not mask), evict-first in L2 where EVICT_FIRST."""
    if EVICT_FIRST:
        return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    return tl.load(ptrs, mask=mask, other=0.0)
