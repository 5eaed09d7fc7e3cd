"""Paged-cache slots of a captured step's tokens, from positions and a block table, in one Triton kernel:

    slot[i] = table[i // per_seq, pos[i] // block_size] * block_size + pos[i] % block_size

A CUDA-graph step computes them on the device (its positions advance there); as PyTorch ops that is ~9 small kernels
a KV-cache group (an arange, two divisions, an index, a cast, a product, a remainder, a sum, a copy). Positions are
never negative, so integer division is the floor. gemma4/model_runner.py calls it on CUDA and keeps those ops on the
CPU (where Triton is an optional dependency and no compiled kernel can read the tensors).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .pdl import wait_then_release


@triton.jit
def _slot_mapping_kernel(pos_ptr, table_ptr, out_ptr, n, per_seq, stride_table, block_size, BLOCK: tl.constexpr,
                         PDL: tl.constexpr):
    wait_then_release(PDL)  # positions and tables are the step's inputs
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    p = tl.load(pos_ptr + i, mask=ok, other=0).to(tl.int64)
    blk = tl.load(table_ptr + (i // per_seq).to(tl.int64) * stride_table + p // block_size, mask=ok, other=0)
    tl.store(out_ptr + i, blk.to(tl.int64) * block_size + p % block_size, mask=ok)


def _check(positions, table, out):
    if positions.dim() != 1 or table.dim() != 2 or out.shape != positions.shape or out.dtype != torch.long:
        raise ValueError(f"slot_mapping needs positions [T], a block table [B, W] and out [T] int64, got "
                         f"{tuple(positions.shape)}, {tuple(table.shape)} and {tuple(out.shape)} {out.dtype}")
    if table.shape[0] == 0 or positions.numel() % table.shape[0]:
        raise ValueError(f"slot_mapping: {positions.numel()} positions do not split evenly over {table.shape[0]} "
                         f"sequences")


def slot_mapping(positions: torch.Tensor, table: torch.Tensor, block_size: int, out: torch.Tensor) -> torch.Tensor:
    """out[i] = the slot of positions[i] of sequence i // (T / B) (every sequence has T / B tokens)."""
    _check(positions, table, out)
    n = positions.numel()
    block = min(1024, triton.next_power_of_2(max(n, 1)))
    if n:
        _slot_mapping_kernel[(triton.cdiv(n, block),)](positions, table, out, n, n // table.shape[0], table.stride(0),
                                                       block_size, BLOCK=block, num_warps=4, **pdl.args(out))
    return out
