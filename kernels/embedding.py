"""Embedding rows times a scale, `F.embedding(ids, w) * scale`, in one Triton kernel where PyTorch takes two (a gather,
then a multiply by a Python float). Gemma scales both its token embedding and its per-layer-input token part so.

The product is in fp32 and rounded once to the table's dtype, as PyTorch's multiply rounds it: bit-equal to the two
ops. Token ids are not checked here (a kernel cannot raise): callers pass ids inside the table, as the engine checks
every host token (gemma4/engine.py) and sampled ids come from the model's own vocabulary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .pdl import wait_then_release
from .triton_round import round_like


@triton.jit
def _embedding_kernel(ids_ptr, w_ptr, out_ptr, d, stride_w, stride_out, scale, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_then_release(PDL)  # the ids are the step's input: written before this kernel
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < d
    idx = tl.load(ids_ptr + row).to(tl.int64)
    v = tl.load(w_ptr + idx * stride_w + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, round_like(v * scale, out_ptr).to(out_ptr.dtype.element_ty), mask=mask)


def embedding_scaled(ids: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    """ids [T] (integers inside w's rows), w [V, D] with unit column stride -> w[ids] * scale [T, D] in w's dtype."""
    if ids.dim() != 1 or ids.dtype.is_floating_point or w.dim() != 2 or w.stride(1) != 1:
        raise ValueError(f"embedding_scaled needs integer ids [T] and w [V, D] with unit column stride, got ids "
                         f"{tuple(ids.shape)} {ids.dtype} and w {tuple(w.shape)} stride {w.stride()}")
    t, d = ids.shape[0], w.shape[1]
    out = torch.empty(t, d, dtype=w.dtype, device=w.device)
    block = min(2048, triton.next_power_of_2(d))
    if t:
        _embedding_kernel[(t, triton.cdiv(d, block))](ids, w, out, d, w.stride(0), out.stride(0), float(scale),
                                                      BLOCK=block, num_warps=4, **pdl.args(out))
    return out
