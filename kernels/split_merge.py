"""Merging a split decode's partials (kernels/triton_paged.py): one (token, query head) row at a time, either in a
kernel of its own after the attention (the default) or in the attention's last program of each (query tile, kv head)
to store its partials (MERGE_LAST).

Why the second: at batch 1 the merge kernel is 1.7 us of a 9.2 us attention call on the H100
(bench/results/h100/kselect_triton/T_tail/timeline.md), most of it a launch and a wait for one L2 read. The last
program to arrive knows, through an atomic counter, that every split's partials are stored, and merges them itself.
Both paths merge a row with the same code, so they give the same bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import release_late, wait_then_release
from .switches import switched

LOG2E = 1.4426950408889634

# MERGE_LAST: in a small-batch decode, the attention's last program to store its partials merges them. Off: E4B's
# batch-1 step decoded 0.933x with it on the H100 (bench/results/h100/kv_pre/): one program merges the group's
# query heads one after another. `merge_last(on)` sets it.
MERGE_LAST = False
COUNTERS = 4096  # int32 tickets a device: (sequence x query tile) x kv heads of a small decode, at most
_TICKETS: dict = {}


def merge_last(on: bool):
    """MERGE_LAST inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), MERGE_LAST=on)


def tickets(device: torch.device, needed: int) -> torch.Tensor:
    """The device's counters, zero between launches (each group's last program resets its own). One set a device: the
    attention calls of a step run on one stream, and under PDL one starts only after the one before has completed."""
    if needed > COUNTERS:
        raise ValueError(f"merge_last: {needed} (query tile, kv head) groups, at most {COUNTERS}")
    if device not in _TICKETS:
        _TICKETS[device] = torch.zeros(COUNTERS, dtype=torch.int32, device=device)
    return _TICKETS[device]


@triton.jit
def merge_row(ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, t, h, num_splits, hq, stride_ot, stride_oh,
              S_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, HAS_SINK: tl.constexpr,
              PDL: tl.constexpr = False):
    """out[t, h] from the splits' (acc, m, l) partials, m in log2 units; the sink logit joins here."""
    s = tl.arange(0, S_PAD)
    s_ok = s < num_splits
    d = tl.arange(0, D_PAD)
    base = (t.to(tl.int64) * num_splits + s) * hq + h
    m = tl.load(ws_ml_ptr + base * 2, mask=s_ok, other=float("-inf"))
    l_ = tl.load(ws_ml_ptr + base * 2 + 1, mask=s_ok, other=0.0)
    m_all = tl.max(m, 0)
    if HAS_SINK:
        sk = tl.load(sink_ptr + h) * LOG2E
        m_all = tl.maximum(m_all, sk)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    w = tl.exp2(m - m_safe)
    denom = tl.sum(l_ * w, 0)
    if HAS_SINK:
        denom += tl.exp2(sk - m_safe)
    acc = tl.load(ws_acc_ptr + base[:, None] * D + d[None, :], mask=s_ok[:, None] & (d < D)[None, :], other=0.0)
    o = tl.sum(acc * w[:, None], 0) / tl.where(denom == 0.0, 1.0, denom)
    release_late(PDL)  # kernels/pdl.py LATE: after the partials' reads, before the store
    tl.store(out_ptr + t * stride_ot + h * stride_oh + d, o.to(out_ptr.dtype.element_ty), mask=d < D)


@triton.jit
def _merge_splits(ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, num_splits, hq, stride_ot, stride_oh,
                 S_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, HAS_SINK: tl.constexpr,
                 PDL: tl.constexpr):
    """The default: one program a (token, query head), after the attention kernel."""
    wait_then_release(PDL)
    merge_row(ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, tl.program_id(0), tl.program_id(1), num_splits, hq,
              stride_ot, stride_oh, S_PAD, D, D_PAD, HAS_SINK, PDL)


@triton.jit
def merge_if_last(cnt_ptr, ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, q_start, first_tok, q_len, kvh, num_splits, hq,
                  stride_ot, stride_oh, ROWS: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr, D: tl.constexpr,
                  D_PAD: tl.constexpr, HAS_SINK: tl.constexpr):
    """Called by every split's program of one (query tile, kv head) after it stored its partials: the last to arrive
    merges the group's rows (ROWS tokens x G heads) and resets the group's counter for the next launch."""
    tl.debug_barrier()  # every thread's partials are stored before the release below
    last = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu") == num_splits - 1
    if last:
        for i in range(ROWS * G):
            tok = first_tok + i // G
            if tok < q_len:
                merge_row(ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, q_start + tok, kvh * G + i % G, num_splits, hq,
                          stride_ot, stride_oh, S_PAD, D, D_PAD, HAS_SINK)
        tl.store(cnt_ptr, 0)
