"""Bring a weight's bytes into the GPU's L2 cache ahead of the kernel that reads them (SM90: cp.async.bulk.prefetch).

Why: a decode step alternates weight-bound projections with latency-bound kernels (attention, norms, the q/k/v
kernel), and while the latter run, memory bandwidth idles: on the H100, a batch-1 E4B step spends ~1.1 ms of its
4.3 ms outside the projections (bench/results/h100/skinny/README.md). A projection whose weights were prefetched
meanwhile reads them from L2 instead of HBM. A prefetch is a hint: it writes nothing and changes no result, so it
may run on a side stream beside the step (gemma4/fused.py).

One program issues PER_PROG bulk prefetches of CHUNK bytes each, one a thread, from TMA's queue: no registers or
shared memory hold the data, so a few programs keep the memory system busy. Sizes are multiples of 16 bytes, as the
instruction needs (a tail below 16 bytes is left out: it is a hint). No CPU path: the interpreter has no PTX.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .switches import switched

CHUNK = 16384  # bytes a prefetch instruction
PER_PROG = 32  # prefetches a program: 512 KB, so a 10 MB weight is ~20 programs


@triton.jit
def _prefetch_kernel(base, nbytes, CHUNK: tl.constexpr, PER_PROG: tl.constexpr):
    off = (tl.program_id(0) * PER_PROG + tl.arange(0, PER_PROG)).to(tl.int64) * CHUNK
    size = tl.minimum(nbytes - off, CHUNK) // 16 * 16
    size = tl.where(off < nbytes, size, 0).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [base + off, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def rows_to_l2(rows_ptr, row_ok, ncols, base, LINES: tl.constexpr, LINE: tl.constexpr):
    """Inside a kernel: asks L2 for the first LINES 128-byte lines (LINE elements each) from each of a program's rows
    (rows_ptr [R, 1] pointers), those past `ncols` columns or on rows not row_ok left out (they ask for `base`'s line).
    One prefetch.global.L2 a line: nothing comes into registers. A kernel launched with PDL may do this before its
    wait for weights only (kernels/pdl.py). LINES 0: nothing (the interpreter runs no inline asm)."""
    if LINES != 0:
        cols = tl.arange(0, LINES) * LINE
        lines = tl.where(row_ok[:, None] & (cols < ncols)[None, :], rows_ptr + cols[None, :], base)
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32,
                                  is_pure=False, pack=1)


def tiles_switch(namespace: dict, what: str, tiles):
    """A projection kernel's PREFETCH_W (K tiles of W asked of L2 before its PDL wait) set to 0, 1, 2 or 4 inside."""
    if type(tiles) is not int or tiles not in (0, 1, 2, 4):
        raise ValueError(f"{what} prefetch_w takes 0, 1, 2 or 4 K tiles, got {tiles!r}")
    return switched(namespace, PREFETCH_W=tiles)


def w_lines(tiles: int, launch: dict, x: torch.Tensor, cols: int) -> dict:
    """rows_to_l2's LINES (as W_LINES) and LINE for `tiles` K tiles of `cols` columns of x's dtype (at least a line a
    tile): under PDL on a GPU only (without PDL the kernel's own loads come as soon; the interpreter has no asm)."""
    tiles = tiles if launch["PDL"] and x.is_cuda else 0
    return dict(W_LINES=tiles * max(1, cols * x.element_size() // 128), LINE=128 // x.element_size())


def supported(t: torch.Tensor) -> bool:
    """Whether t lives on a CUDA device that has the instruction (SM90 or later)."""
    return t.is_cuda and torch.cuda.get_device_capability(t.device)[0] >= 9


def byte_ranges(tensors, limit: int | None = None) -> list[tuple[int, int]]:
    """(address, bytes) of each tensor (its first `limit` bytes where given), adjacent ranges merged (q/k/v weights
    that are views of one buffer: one launch). Each tensor must be contiguous."""
    spans = []
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError(f"prefetch needs contiguous tensors, got shape {tuple(t.shape)} strides {t.stride()}")
        n = t.numel() * t.element_size()
        spans.append((t.data_ptr(), n if limit is None else min(n, int(limit))))
    merged: list[tuple[int, int]] = []
    for start, n in sorted(spans):
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1] = (merged[-1][0], merged[-1][1] + n)
        elif n:
            merged.append((start, n))
    return merged


def prefetch_l2(ranges: list[tuple[int, int]]) -> None:
    """Prefetch each (address, bytes) range of device memory into L2 on the current stream (an SM90+ device: the
    caller checks `supported`). A range whose address is not 16-byte aligned starts at the next aligned byte."""
    for start, n in ranges:
        skip = -start % 16
        if n - skip >= 16:
            _prefetch_kernel[(triton.cdiv(n - skip, CHUNK * PER_PROG),)](start + skip, n - skip, CHUNK=CHUNK,
                                                                         PER_PROG=PER_PROG, num_warps=1)
