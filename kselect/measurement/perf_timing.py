"""How `kselect perf` times one bucket: input sets (rotated so K/V come from HBM, or spread over a range
of contexts), the optional fence before each call (the work a model step puts between two attention calls),
the CUDA-graph or eager timing, and in prefill the host times (an eager call; the backend's plan before a
graph replay).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import NamedTuple

from kselect.measurement.perf_targets import Target

L2_BYTES = 50 * 2**20
COLD_FACTOR, COLD_SETS_MAX = 4, 64  # rotated input sets: at least 4x L2 of K/V, at most 64 sets
FENCES = ("write", "gemv", "layer")  # --fence kinds (parse_fence)
SPREAD_SETS = 8  # with --context-spread, at least this many sets (contexts) per decode bucket


def make_inputs(t: Target, batch: int, context: int, q_len: int, device: str, seed: int):
    import torch

    from kselect.backends.base import AttentionMetadata, LayerParams
    from kselect.backends.common import query_scale
    from kselect.kernels.cache_ops import quantize_query

    g = torch.Generator(device=device).manual_seed(seed)
    page = t.page
    npages = -(-context // page)
    first_real = 0 if t.window is None else max(0, (context - t.window - q_len) // page)
    real = npages - first_real
    total = batch * real + 1  # block 0: a shared filler for pages the window never reaches
    table = torch.zeros(batch, npages, dtype=torch.int32, device=device)
    table[:, first_real:] = 1 + torch.randperm(batch * real, device=device, generator=g).to(torch.int32).view(batch, real)
    dtype = getattr(torch, t.model_dtype)
    shape = (total, page, t.hkv, t.head)
    k = torch.randn(shape, device=device, dtype=dtype, generator=g)
    v = torch.randn(shape, device=device, dtype=dtype, generator=g)
    scales = {}
    if t.fp8:
        fp8 = torch.float8_e5m2 if t.kv == "fp8_e5m2" else torch.float8_e4m3fn
        k, v = (k * 2).to(fp8), (v * 2).to(fp8)
        one = lambda x: torch.tensor(x, dtype=torch.float32, device=device)  # noqa: E731
        scales = dict(k_scale=one(0.5), v_scale=one(0.5), q_scale=one(0.125) if t.descale == "q_k_v" else None)
    q = torch.randn(batch * q_len, t.hq, t.head, device=device, dtype=dtype, generator=g)
    cu = torch.arange(batch + 1, device=device, dtype=torch.int32) * q_len
    used = torch.full((batch,), context, device=device, dtype=torch.int32)
    meta = AttentionMetadata(cu, used, table, q_len, context)
    layer = LayerParams(t.head ** -0.5, window_left=t.window - 1 if t.window else -1, out_dtype=dtype, **scales)
    qs = query_scale(t.descale, k.dtype, layer, device)
    if qs is not None:  # quant-query: the model's q/k/v kernel hands attention q in FP8 (gemma4/fused.py)
        q = quantize_query(q, qs, k.dtype)
    nbytes = (k.numel() + v.numel()) * k.element_size() + q.numel() * q.element_size()
    return dict(q=q, k=k, v=v, meta=meta, layer=layer, bytes=nbytes)


def spread_contexts(context: int, n: int, spread: float) -> list[int]:
    """n contexts evenly over [context x (1 - spread), context x (1 + spread)], mean `context` (one
    context when spread is 0). A B1 decode kernel's time moves with the exact context (FA3's FP8 call
    on the H200: 28 us at 512 tokens, 21 at 516, 17 at 544; bench/results/h200/perf_pages/), while a
    request decodes over a range of contexts: a spread figure is that range's mean, not one point's."""
    if spread <= 0 or n < 2:
        return [context] * n
    lo, hi = context * (1 - spread), context * (1 + spread)
    return [max(1, round(lo + (hi - lo) * i / (n - 1))) for i in range(n)]


def parse_fence(text: str) -> tuple[str, int] | None:
    """`--fence KIND:MIB` -> (kind, MiB); "" -> None. write: zero MIB of memory before each call; gemv: a
    bf16 matrix-vector product over MIB of weights before each call, as a layer's projections read their
    weights between two attention calls of a model step, the figure being the fenced graph's time less the
    fences' own; layer: that GEMV, then one small elementwise kernel, as the model runs its norm/rope/KV-write
    kernel between the q/k/v GEMM and attention, the figure being the calls' own kernels on the fenced
    graph's timeline (calls_timeline_ms). In prefill the layer fence multiplies the call's query rows (the
prompt's tokens) by those weights: a layer's GEMMs at that many tokens, compute-bound as in the model."""
    if not text:
        return None
    kind, _, mib = text.partition(":")
    if kind not in FENCES or not mib.isdigit() or int(mib) < 1:
        raise ValueError(f"--fence {text!r}: expected KIND:MIB with KIND one of {', '.join(FENCES)} and MIB >= 1 "
                         "(e.g. gemv:512)")
    return kind, int(mib)


def make_fence(fence: tuple[str, int], device: str, rows: int = 1):
    """One fence call (parse_fence): the work a model step puts between two attention calls. `rows`: the
    activations' rows of a layer fence (the call's query tokens in prefill; 1, a GEMV, in decode)."""
    import torch

    kind, mib = fence
    rows = rows if kind == "layer" else 1
    if kind == "write":
        buf = torch.empty((mib << 20) // 4, dtype=torch.float32, device=device)
        return buf.zero_
    k = 8192  # a layer's hidden size, order of magnitude; n columns make up the bytes
    w = torch.randn(k, max(1, (mib << 20) // (2 * k)), dtype=torch.bfloat16, device=device)
    x = torch.randn(rows, k, dtype=torch.bfloat16, device=device)
    out = torch.empty(rows, w.shape[1], dtype=torch.bfloat16, device=device)
    if kind == "gemv":
        return lambda: torch.mm(x, w, out=out)
    head = out[:, :k]  # up to a q/k/v row's size: a few us, like the model's kernel
    tail = torch.empty_like(head)

    def layer():
        torch.mm(x, w, out=out)
        return tail.copy_(head)  # plain stream order: what follows starts when it ends
    return layer


class Timing(NamedTuple):
    ms: float  # per call
    graph: bool  # timed as a CUDA graph
    host_ms: float | None  # prefill: host time of one eager call; None for decode
    plan_ms: float | None  # prefill graphs: host time of the backend's plan before a replay (plan_ms below)


def time_bucket(be, t: Target, phase: str, batch: int, context: int, device: str, reps: int,
                spread: float = 0.0, fence: tuple[str, int] | None = None) -> Timing:
    """Timing of one bucket: ms per call, graph, and in prefill the host times (eager call, graph plan).
    Decode with `spread` > 0: the rotated input sets run contexts spread around `context` (spread_contexts).
    `fence` (parse_fence): each call follows a fence call, as a layer's attention follows the weight reads
    of the GEMMs before it; the fences' own graph is timed too and subtracted. Back to back, one call's
    kernels can overlap the next call's and its K/V can stay in L2: neither happens inside a model step."""
    import torch

    q_len = 1 if phase == "decode" else context
    spread = spread if phase == "decode" else 0.0
    first = make_inputs(t, batch, context, q_len, device, seed=0)
    # enough input sets that each call reads its K/V from HBM, as in a model step (the layers' weights
    # stream through L2 between two calls of one layer); the former 8 sets of a small B1 bucket (4 MB of
    # FP8 K/V) fit in the 50 MB L2
    n_sets = 1 if device == "cpu" else max(1, min(COLD_SETS_MAX, math.ceil(COLD_FACTOR * L2_BYTES / first["bytes"])))
    if spread > 0:  # enough sets to cover the range, within 16 GB of inputs
        n_sets = max(n_sets, min(SPREAD_SETS, int(16e9 // first["bytes"])))
    ctxs = spread_contexts(context, n_sets, spread)
    sets = [first if i == 0 and c == context else make_inputs(t, batch, c, q_len, device, seed=i) for i, c in enumerate(ctxs)]
    del first
    calls = [lambda s=s: be.forward(s["q"], s["k"], s["v"], s["meta"], s["layer"]) for s in sets]
    if device == "cpu":
        for c in calls:
            c()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for c in calls:
                c()
            times.append((time.perf_counter() - t0) * 1e3 / len(calls))
        return Timing(statistics.median(times), False, host_ms(calls, reps) if phase == "prefill" else None, None)
    graph = be.supports_cuda_graphs()
    for s, c in zip(sets, ctxs):
        be.prepare_replay(s["meta"], [c] * batch, s["meta"].block_table.cpu())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    flush = make_fence(fence, device, rows=batch * q_len if phase == "prefill" else 1) if fence and graph else None
    if flush is not None:  # its first call sets up cuBLAS, which must not happen inside a capture
        flush()
        torch.cuda.synchronize()
    steps = [(lambda c=c: (flush(), c())) for c in calls] if flush is not None else calls
    run = _runner(steps, graph)
    if flush is not None and fence[0] == "layer":  # the calls' own kernels on the fenced graph's timeline
        times = [_fenced_timeline_ms(run, flush, len(calls), reps)]
    else:
        times = _time(run, len(calls), reps)
        if flush is not None:  # the fences alone, replayed the same way: their time is not the kernel's
            fences = _time(_runner([flush] * len(calls), True), len(calls), reps)
            times = [a - b for a, b in zip(sorted(times), sorted(fences))]
    host = host_ms(calls, reps) if phase == "prefill" else None
    plan = plan_ms(be, sets, ctxs, batch, reps) if phase == "prefill" and graph else None
    del sets, calls, steps, flush
    return Timing(statistics.median(times), graph, host, plan)


def calls_timeline_ms(events, fence_kernels: set[str], calls: int) -> float:
    """ms per call that the kernels other than the fence's hold on a fenced graph's timeline: their durations
    plus the launch gap before each (kselect.measurement.profiling.timeline_ms), the measure the model step's profile in
    kselect/measurement/e2e/ takes. A difference of two graph times (the gemv fence) carries the GEMV's jitter:
    1% of a 1 GiB read is 2.5 us, and FA3's B1 call (16 us of kernels in the model step) came out between
    12.7 and 18.8 us so in five timings (bench/results/h200/hf_mtp/D, L, R)."""
    import torch

    from kselect.measurement.profiling import timeline_ms

    cuda = torch.autograd.DeviceType.CUDA
    if not any(e.device_type == cuda and e.name not in fence_kernels for e in events):
        raise RuntimeError("the profiler listed none of the calls' kernels in the fenced CUDA graph, so a "
                           "layer fence cannot time them here; use --fence gemv:MIB")
    return timeline_ms(events, lambda n: n not in fence_kernels) / calls


def _fenced_timeline_ms(run, flush, calls: int, reps: int) -> float:
    """calls_timeline_ms of `reps` replays of `run`; the fence's kernels are named by profiling one alone."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if torch._C._autograd._profiler_enabled():  # kineto does not nest
        raise RuntimeError("a layer-fenced figure is read from its own profile and cannot be timed inside "
                           "another profiler")
    alone = _runner([flush], True)
    run()  # a graph's first replay uploads it: not timed
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        alone()
        torch.cuda.synchronize()
    fence_kernels = {e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
    return calls_timeline_ms(p.events(), fence_kernels, calls * reps)


def _runner(calls, graph: bool):
    """One replay of every call: a captured CUDA graph, or the calls in order."""
    import torch

    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for c in calls:
                c()
        return g.replay

    def run():
        for c in calls:
            c()
    return run


def _time(run, n: int, reps: int) -> list[float]:
    """ms per call of `reps` timed batches of replays (n calls a replay)."""
    import torch

    run()
    torch.cuda.synchronize()
    inner = max(1, 24 // n)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            run()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / (inner * n))
    return times


def plan_ms(be, sets, ctxs, batch: int, reps: int) -> float:
    """Median host time of the backend's prepare_replay for one input set after its calls ran: the planning
    a graph-replayed step does on the host for each group before its replay (FlashInfer re-plans there,
    about 1 ms; the others do nothing). Nothing runs on the GPU meanwhile, as at the start of a prefill
    step, which waits on the previous step's sampled tokens; so the objective charges it once per step."""
    import torch

    times = []
    for _ in range(reps):
        for s, c in zip(sets, ctxs):
            table = s["meta"].block_table.cpu()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            be.prepare_replay(s["meta"], [c] * batch, table)
            times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def host_ms(calls, reps: int) -> float:
    """Median host wall time of one eager call, the GPU idle before it: what a call costs a host-bound
    step (launch, argument conversion, host work). Each input set is called once untimed first, so a
    backend that plans once per batch metadata (FlashInfer) is timed at its per-layer steady state, as
    every layer after a group's first runs in the engine."""
    import torch

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = []
    for _ in range(reps):
        for c in calls:
            c()
            sync()
            t0 = time.perf_counter()
            c()
            times.append((time.perf_counter() - t0) * 1e3)
            sync()
    return statistics.median(times)
