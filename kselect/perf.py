"""`kselect perf`: time the kernel behind every verified conformance claim over shape buckets and
merge the results into `conf/perf/<gpu_model>.yaml` (schema: selector/perf.py).

    kselect perf --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b \\
        --decode 1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --warm-jobs 8

Targets: for each model's sliding group (its head size, KV heads and window) and full group, every
kernel path whose conformance claim `<path>:<kv>:d<head>:window` (sliding) or `:causal` (full) is
verified in conf/conformance/<gpu>.yaml, for each KV dtype, at the claim's own page and every page
the objective can run it at (selector/reachable.py, `--rules`, up to `--max-page`). Each target is built like the engine
builds it (backends.make_backend over a hand-made GroupSelection) and timed per bucket:
decode = B sequences x 1 new token over C cached tokens; prefill = B fresh prompts of C tokens.
On CUDA: R rotated input sets (R so they exceed 4x L2) captured as one CUDA graph (FlashInfer
re-planned through prepare_replay as under the engine's graphs), median of --reps replays; with
`--context-spread F` the decode sets run contexts spread over C x (1 +- F), a figure for a range. On CPU
(tests): eager calls timed with perf_counter, graph=false in the entry. Sliding decode allocates
only the pages the window reaches. `--warm-jobs N` first runs every target once on a tiny shape in
N processes, so JIT compiles (FlashInfer, FA4, Triton) overlap and land in their disk caches before
the timed pass, which runs in this process, one kernel at a time. The file is merged and written
atomically after every target, so a timeout keeps what was measured.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple


from kselect.selector import perf as perfdata
from kselect.selector.conformance import CONFORMANCE_DIR

L2_BYTES = 50 * 2**20
COLD_FACTOR, COLD_SETS_MAX = 4, 64  # rotated input sets: at least 4x L2 of K/V, at most 64 sets
FENCES = ("write", "gemv", "layer")  # --fence kinds (parse_fence)
SPREAD_SETS = 8  # with --context-spread, at least this many sets (contexts) per decode bucket
_KV_NAME = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_PKG = {"FLASHINFER": "flashinfer-python", "FLASH_ATTN_v4": "flash-attn-4", "FLASH_ATTN_v3": "vllm", "TRITON_ATTN": "triton"}


@dataclass(frozen=True)
class Target:
    backend: str
    version: int | None
    kv: str  # claim dtype: bf16, fp8, ...
    head: int
    hq: int
    hkv: int
    window: int | None
    page: int  # the kernel block the call reads (targets: the claim's own and every page the objective reaches)
    descale: str

    @property
    def path(self) -> str:
        return f"{self.backend}_v{self.version}" if self.version else self.backend

    @property
    def fp8(self) -> bool:
        return self.kv.startswith("fp8")

    @property
    def model_dtype(self) -> str:
        return "bfloat16" if self.fp8 else _KV_NAME[self.kv]


def parse_grid(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        b, _, c = item.partition("x")
        if not (b.isdigit() and c.isdigit()) or int(b) < 1 or int(c) < 1:
            raise SystemExit(f"kselect perf: bad bucket {item!r}: want <batch>x<context>, e.g. 16x8192")
        out.append((int(b), int(c)))
    return out


def verified_claims(path: Path) -> set[str]:
    from kselect.selector.files import load_yaml

    data = load_yaml(path, "a conformance file (kselect conformance)") or {}
    return {cid for cid, r in (data.get("claims") or {}).items() if (r or {}).get("status") == "verified"}


def model_shapes(model: str) -> list[tuple[int, int, int, int | None]]:
    """(head, q heads, kv heads, window) of the model's sliding and full groups (conf/model)."""
    from kselect.selector.api import compose

    m = compose(["platform=cpu", f"model={model}"]).model
    return [(m.head_dim, m.num_attention_heads, m.num_key_value_heads, m.sliding_window),
            (m.global_head_dim, m.num_attention_heads, m.global_kv_heads(), None)]


def model_runs(model: str, platform: str, rules: tuple[str, ...]):
    """The kernel runs (path, dtype, shape, page) the objective can reach for this model, over its
    model-dtype and FP8 caches and each rules preset (selector/reachable.py)."""
    from kselect.selector.api import compose
    from kselect.selector.reachable import reachable

    out = set()
    for kv in ("auto", "fp8"):
        for r in rules or (None,):
            out |= reachable(compose([f"platform={platform}", f"model={model}", f"kv_cache={kv}", *([f"rules={r}"] if r else [])]))
    return out


def targets(verified: set[str], models: list[str], kernels: set[str] | None, kvs: set[str] | None,
            platform: str = "auto", rules: tuple[str, ...] = (), max_page: int = 128) -> list[Target]:
    """One target per kernel path, KV dtype, model group shape and page that a verified causal/window
    claim covers. Pages: the claim's own run (selector/claims.py, as conformance verified it, e.g. the
    FA4 fork's 64-token FP8 pages) and every page the objective can run that kernel at for the model
    (model_runs) up to max_page, since the objective reads a figure only at the page a group runs.
    Descale mode: the claim's own run."""
    from kselect.selector.claims import claim_runs

    out: list[Target] = []
    for model in models:
        runs = model_runs(model, platform, rules)
        for head, hq, hkv, window in model_shapes(model):
            feature = "window" if window else "causal"
            for cid in sorted(verified):
                path, kv, d, feat = cid.split(":")
                if feat != feature or d != f"d{head}" or (kernels and path not in kernels) or (kvs and kv not in kvs):
                    continue
                backend, _, ver = path.partition("_v")
                run = claim_runs([cid], (f"platform={platform}",))[cid]
                pages = {run.page} | {r.page for r in runs if r.page <= max_page
                                      and (r.path, r.kv, r.head, r.num_kv_heads, r.window) == (path, kv, head, hkv, window)}
                for page in sorted(pages):
                    t = Target(backend, int(ver) if ver else None, kv, head, hq, hkv, window, page, run.descale)
                    if t not in out:
                        out.append(t)
    return out


# ---------------------------------------------------------------- inputs and timing


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


def make_target_backend(t: Target):
    from kselect.backends import make_backend
    from kselect.backends.fixtures import make_group

    return make_backend(make_group(t.backend, t.version, t.head, _KV_NAME[t.kv], t.page, t.page, t.descale,
                                   t.hkv, t.window))


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
    plus the launch gap before each (kselect.profiling.timeline_ms), the measure the model step's profile in
    bench/gemma4/e2e.py takes. A difference of two graph times (the gemv fence) carries the GEMV's jitter:
    1% of a 1 GiB read is 2.5 us, and FA3's B1 call (16 us of kernels in the model step) came out between
    12.7 and 18.8 us so in five timings (bench/results/h200/hf_mtp/D, L, R)."""
    import torch

    from kselect.profiling import timeline_ms

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


def versions(t: Target) -> dict[str, str]:
    import torch

    out = {"torch": str(torch.__version__)}
    if torch.version.cuda:
        out["cuda"] = str(torch.version.cuda)
    for pkg in {"triton", _PKG.get(t.path, "")} - {""}:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    if t.path == "FLASH_ATTN_v3":
        out["KSELECT_FA3_BUILD"] = os.environ.get("KSELECT_FA3_BUILD", "auto")
    return out


# ---------------------------------------------------------------- warm-up (JIT compiles in parallel)


def _warm_one(t: Target, device: str) -> str:
    try:
        be = make_target_backend(t)
        for phase, c in (("decode", 2 * t.page), ("prefill", 2 * t.page)):
            s = make_inputs(t, 1, c, 1 if phase == "decode" else c, device, 0)
            be.forward(s["q"], s["k"], s["v"], s["meta"], s["layer"])
        return "ok"
    except Exception as e:  # noqa: BLE001 - reported, the timed pass records it
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]


def warm_up(ts: list[Target], device: str, jobs: int) -> None:
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
        for t, r in zip(ts, ex.map(_warm_one, ts, [device] * len(ts))):
            print(f"warm {t.path}:{t.kv}:d{t.head}:{'w' + str(t.window) if t.window else 'full'}: {r}", flush=True)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(prog="kselect perf", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-name", required=True, help="GPU model key, e.g. nvidia_h200 (conf/conformance/<name>.yaml)")
    ap.add_argument("--conformance", default=None, help="conformance file (default conf/conformance/<gpu-name>.yaml)")
    ap.add_argument("--out", default=None, help="perf file (default conf/perf/<gpu-name>.yaml); merged, atomic")
    ap.add_argument("--models", default="gemma4_31b", help="comma-separated conf/model names whose shapes to time")
    ap.add_argument("--decode", default="1x1024,1x8192,16x1024,16x8192,64x1024,64x8192", help="BxC buckets")
    ap.add_argument("--prefill", default="1x512,1x4096", help="BxC buckets (C = prompt tokens)")
    ap.add_argument("--kernels", default="", help="only these paths (e.g. FLASHINFER,FLASH_ATTN_v4)")
    ap.add_argument("--kv", default="", help="only these KV dtypes (e.g. bf16,fp8)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--warm-jobs", type=int, default=0, help="compile every target first in N processes")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new targets after this many seconds")
    ap.add_argument("--platform", default=None, help="the selector's platform for each claim's page/descale "
                    "(default: auto, cpu on --device cpu), as `kselect conformance`")
    ap.add_argument("--rules", default="", help="comma-separated conf/rules presets whose reachable pages to time "
                    "(default: the config's own rules)")
    ap.add_argument("--fence", default="",
                    help="KIND:MIB: time each call after a fence (CUDA graphs): "
                         "gemv:MIB reads MIB of bf16 weights as a layer's projections do (figure: the graph less the "
                         "fences' own), layer:MIB adds the small kernel a model runs between them and attention "
                         "(figure: the calls' kernels on the graph's profiled timeline), write:MIB zeroes MIB; "
                         "no overlap with the next call and cold K/V, as inside a model step")
    ap.add_argument("--context-spread", type=float, default=0.0,
                    help="decode buckets: time contexts spread over +-this fraction of each bucket's context (mean "
                    "over the range; 0: the one context)")
    ap.add_argument("--max-page", type=int, default=128, help="time reachable pages up to this many tokens")
    ap.add_argument("--missing", action="store_true", help="time only the buckets the --out file does not hold yet "
                    "(a prefill bucket without host_ms, or a graph-timed one without plan_ms, counts as missing)")
    args = ap.parse_args(argv)
    from kselect.selector.files import safe_name

    safe_name(args.gpu_name, "--gpu-name")  # it names files in conf/
    try:
        fence = parse_fence(args.fence)
    except ValueError as e:
        print(f"kselect perf: {e}", file=sys.stderr)
        return 2
    if fence and args.device == "cpu":
        print("kselect perf: --fence applies to CUDA-graph timing only; CPU entries are timed back to back (fence \"\")",
              file=sys.stderr)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    conf = Path(args.conformance) if args.conformance else CONFORMANCE_DIR / f"{args.gpu_name}.yaml"
    if not conf.exists():
        print(f"kselect perf: no conformance file {conf}: run `kselect conformance` first (only verified claims are timed)",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else perfdata.PERF_DIR / f"{args.gpu_name}.yaml"
    split = lambda s: {x.strip() for x in s.split(",") if x.strip()} or None  # noqa: E731
    platform = args.platform or ("cpu" if args.device == "cpu" else "auto")
    ts = targets(verified_claims(conf), [m for m in args.models.split(",") if m], split(args.kernels), split(args.kv), platform,
                 tuple(sorted(split(args.rules) or ())), args.max_page)
    grid = [("decode", b, c) for b, c in parse_grid(args.decode)] + [("prefill", b, c) for b, c in parse_grid(args.prefill)]
    reps = args.reps or (3 if args.device == "cpu" else 10)
    have: set[str] = set()
    if args.missing and out.exists():
        old = perfdata.load(out.stem, out.parent)
        have = {k for k, e in old.entries.items()
                if e.phase == "decode" or (e.host_ms and (e.plan_ms is not None or not e.graph))} if old else set()
    todo = {t: [(ph, b, c) for ph, b, c in grid if bucket_of(t, ph, b, c) not in have] for t in ts}
    ts = [t for t in ts if todo[t]]
    if args.missing:
        print(f"--missing: {sum(map(len, todo.values()))} buckets of {len(ts)} targets not in {out}", flush=True)
    print(f"{len(ts)} targets x {len(grid)} buckets from {conf}", flush=True)
    t0 = time.monotonic()
    if args.warm_jobs > 0 and args.device != "cpu":
        warm_up(ts, args.device, args.warm_jobs)
        print(f"warm-up {time.monotonic() - t0:.0f} s", flush=True)
    header = dict(gpu=args.gpu_name, torch=str(torch.__version__), measured=datetime.date.today().isoformat(),
                  commit=_git_commit(), command="kselect perf " + " ".join(sys.argv[1:] if argv is None else argv))
    today = header["measured"]
    for t in ts:
        if time.monotonic() - t0 > args.budget_s:
            print(f"budget: skipped {t}", flush=True)
            continue
        try:
            be = make_target_backend(t)
        except Exception as e:  # noqa: BLE001 - a verified claim whose kernel will not build here: say so
            print(f"{t.path}:{t.kv}:d{t.head}:p{t.page}: cannot build: {type(e).__name__}: {e}", flush=True)
            continue
        build = be.kernel_build or t.path
        entries = {}
        for phase, b, c in todo[t]:
            try:
                ms, graph, host, plan = time_bucket(be, t, phase, b, c, args.device, reps, args.context_spread, fence)
            except Exception as e:  # noqa: BLE001 - recorded as missing (no entry), never guessed
                print(f"{t.path}:{t.kv}:d{t.head}:p{t.page} {phase} b{b} c{c}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                if args.device != "cpu":
                    torch.cuda.empty_cache()
                continue
            e = perfdata.PerfEntry(kernel=t.path, build=build, versions=versions(t), kv=t.kv, head=t.head, window=t.window,
                                   phase=phase, batch=b, context=c, num_q_heads=t.hq, num_kv_heads=t.hkv, page=t.page,
                                   ms=float(f"{ms:.4g}"), host_ms=float(f"{host:.4g}") if host else None,
                                   plan_ms=float(f"{plan:.4g}") if plan is not None else None, graph=graph,
                                   context_spread=args.context_spread if phase == "decode" else 0.0,
                                   fence=f"{fence[0]}:{fence[1]}" if fence and graph else "",
                                   gpu=args.gpu_name, date=today)
            entries[e.bucket] = e
            print(f"{e.bucket:64s} {ms:9.4f} ms{' graph' if graph else ''}{f'  host {host:.4f} ms' if host else ''}"
                  f"{f'  plan {plan:.4f} ms' if plan is not None else ''}", flush=True)
            if args.device != "cpu":
                torch.cuda.empty_cache()
        if entries:
            perfdata.merge_write(out, header, entries)
    print(f"wrote {out} ({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


def bucket_of(t: Target, phase: str, batch: int, context: int) -> str:
    return perfdata.bucket_id(t.path, t.kv, t.head, t.window, phase, batch, context, t.hq, t.hkv, t.page)


def _git_commit() -> str:
    """kselect's own commit, short (kselect/provenance.py: KSELECT_COMMIT names a copied tree's)."""
    from kselect.provenance import project_commit

    return project_commit()["commit"][:7]

if __name__ == "__main__":
    raise SystemExit(main())
