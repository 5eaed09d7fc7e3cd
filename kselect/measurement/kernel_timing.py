"""Paged attention inputs and CUDA-event timing shared by the kernel benchmarks
(kselect/measurement/kernels/: attention, gemv, tune_triton_decode): the median of `reps` timings, eager or replayed
from one CUDA graph."""

from __future__ import annotations

import statistics

import torch

from kselect.kernels.cache_ops import quantize

BF = torch.bfloat16
E4 = torch.float8_e4m3fn


def make_inputs(hq, hkv, d, window, b, kv_len, q_len, page, fp8, dev="cuda"):
    """One paged input set. Sliding: only pages touching [kv_len - window - q_len, kv_len) are real."""
    npages = -(-kv_len // page)
    first_real = 0 if window is None else max(0, (kv_len - window - q_len) // page)
    real = npages - first_real
    total = b * real + 1  # page 0 = shared filler
    table = torch.zeros(b, npages, dtype=torch.int32, device=dev)
    ids = 1 + torch.randperm(b * real, device=dev, dtype=torch.int32).view(b, real)
    table[:, first_real:] = ids
    k = torch.randn(total, page, hkv, d, device=dev, dtype=BF)
    v = torch.randn(total, page, hkv, d, device=dev, dtype=BF)
    q = torch.randn(b * q_len, hq, d, device=dev, dtype=BF)
    inp = dict(q=q, k=k, v=v, table=table, cu=torch.arange(0, b + 1, device=dev, dtype=torch.int32) * q_len,
               seqused=torch.full((b,), kv_len, device=dev, dtype=torch.int32), max_q=q_len, max_k=kv_len,
               window_left=-1 if window is None else window - 1, scale=d ** -0.5)
    if fp8:
        sk, sv, sq = 0.25, 0.25, 0.125
        inp.update(k=quantize(k, sk, E4), v=quantize(v, sv, E4), q8=quantize(q, sq, E4),
                   kd=torch.full((b, hkv), sk, device=dev), vd=torch.full((b, hkv), sv, device=dev),
                   qd=torch.full((b, hkv), sq, device=dev))
        del k, v
    return inp


def kv_bytes(inp, window):
    b, L = inp["seqused"].numel(), inp["max_k"]
    read = min(L, window + inp["max_q"] - 1) if window else L
    return 2 * b * read * inp["k"].shape[2] * inp["k"].shape[3] * inp["k"].element_size()


def time_eager(fns, reps):
    for f in fns[:3]:
        f()
    torch.cuda.synchronize()
    inner = max(len(fns), 10)
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(inner):
            fns[i % len(fns)]()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / inner)
    return statistics.median(out)


def time_graph(fns, reps):
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / len(fns))
    del g
    return statistics.median(out)
