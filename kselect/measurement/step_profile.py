"""Kernels and device time of one model step, by kernel category (torch.profiler): the decode and prefill profiles
that kselect.measurement.e2e and kselect.measurement.gemma4.fusion report. The attention share is what `kselect explain`
predicts from conf/perf."""

from __future__ import annotations

import gc
from collections import defaultdict

import torch

from kselect.gemma4.engine import Engine, EngineConfig
from kselect.measurement.profiling import (ATTENTION_RANGE, device_kernels, device_ms, in_range, in_range_ms,
                                           timeline_ms)


def free():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


CATEGORIES = ("gemm", "attention", "norm", "elementwise", "copies")
# Substrings of every attention backend's kernel names: kselect's Triton (_attn_fwd, _merge_splits), FA3/FA4 and
# vLLM's fork (flash), FlashInfer (BatchPrefillWithPagedKVCache..., BatchDecode...), the FP8 query quantizer, and
# vLLM's Triton kernel (kernel_unified_attention and its split-K reduce_segments, triton_unified_attention.py).
ATTENTION_NAMES = ("attn", "flash", "paged", "fmha", "_merge", "quant_query", "unified_attention", "reduce_segments")


def category(name: str) -> str:
    n = name.lower()
    if n.startswith("memcpy") or n.startswith("memset"):
        return "copies"
    if any(k in n for k in ATTENTION_NAMES):  # before gemm: FA4's CuTe-DSL kernel names contain "cutlass"
        return "attention"
    if any(k in n for k in ("gemm", "gemv", "xmma", "cutlass", "cublas", "splitk", "nvjet", "wgmma")):
        return "gemm"
    if "norm" in n or "reduce" in n:  # our norm kernels; the unfused norm's mean is a reduce kernel
        return "norm"
    return "elementwise"


def by_category(events) -> tuple[dict, dict, dict]:
    """The profiler's device kernels: (count, ms) per category, and launches per kernel name."""
    count, ms, names = defaultdict(int), defaultdict(float), defaultdict(int)
    for e in device_kernels(events):
        c = category(e.name)
        count[c] += 1
        ms[c] += device_ms(e)
        names[e.name[:80]] += 1
    return count, ms, names


def attention_kernels(events, per: float) -> dict[str, dict]:
    """Attention kernels by name: launches and mean microseconds, per `per` (steps, prefills or calls)."""
    n, us = defaultdict(int), defaultdict(float)
    for e in device_kernels(events):
        if category(e.name) == "attention":
            n[e.name[:90]] += 1
            us[e.name[:90]] += e.time_range.end - e.time_range.start
    return {k: dict(launches=n[k] / per, mean_us=us[k] / n[k]) for k in sorted(n, key=lambda k: -us[k])}


def profile_decode(model, groups, prompt, steps: int, layers: int, graphs: bool = False) -> dict:
    """Kernels and device time per decode step: eager, or (graphs=True) the CUDA-graph replays the engine
    decodes with (FlashInfer plans its graph calls differently; no attention-call ranges there). Kernels launch
    plainly here (kernels/pdl.py off): under PDL a kernel's profiled duration includes the wait for the one
    before it, so categories would overlap; the step's own time is measured with PDL where the model uses it."""
    from kselect.kernels import pdl

    with pdl.off():
        return _profile_decode(model, groups, prompt, steps, layers, graphs)


def _profile_decode(model, groups, prompt, steps: int, layers: int, graphs: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + steps + 8, cuda_graphs=graphs))
    logits = eng.extend([0], [prompt])
    tok = int(logits.argmax(-1)[0])
    eng.decode([0], [tok])  # warm-up
    torch.cuda.synchronize()
    with in_range(eng.backends.values(), "forward", ATTENTION_RANGE), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            eng.decode([0], [tok])
        torch.cuda.synchronize()
    count, ms, names = by_category(prof.events())
    calls, range_ms = in_range_ms(prof.events(), ATTENTION_RANGE)
    timeline = timeline_ms(prof.events(), lambda n: category(n) == "attention")
    replayed = eng.use_graphs
    del eng
    free()
    kernels = sum(v for k, v in count.items() if k != "copies") / steps
    return dict(steps=steps, graphs=replayed, kernels_per_step=kernels, kernels_per_layer=kernels / layers,
                copies_per_step=count["copies"] / steps,
                ms_per_step={c: ms[c] / steps for c in CATEGORIES},
                kernel_ms_per_step=sum(ms[c] for c in CATEGORIES if c != "copies") / steps,
                # every kernel an attention backend's forward launched (its descale and quant-query work too):
                # the scope of a conf/perf bucket, which times that whole call
                attention_call_ms_per_step=range_ms / steps, attention_calls_per_step=len(calls) / steps,
                # the attention kernels plus the launch gap before each: a perf bucket's graph wall time counts both
                attention_timeline_ms_per_step=timeline / steps,
                attention_kernels=attention_kernels(prof.events(), steps),
                top_kernels=sorted(((n, c / steps) for n, c in names.items()), key=lambda x: -x[1])[:25])


def sync() -> None:
    if torch.cuda.is_available():  # CPU: a smoke run of the profiles
        torch.cuda.synchronize()


def profile_prefill(model, groups, prompt, reps: int, max_seq_len: int | None = None) -> dict:
    """Kernels and device time of one sequence's prefill of `prompt`, as the engine runs it: replayed from its
    token bucket's CUDA graph (gemma4/graphs.py) where the bucket holds the prompt, else eager. The
    attention share is what `kselect explain` predicts for the prefill phase. `max_seq_len`: the engine's
    (default: the prompt + 8)."""
    from torch.profiler import ProfilerActivity, profile

    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=max_seq_len or len(prompt) + 8, cuda_graphs=True))
    eng.extend([0], [prompt])  # warm-up: compiles, captures the bucket's graph and checks it
    sync()
    before = eng.prefill_graph_steps
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            eng.reset()  # the captured graphs stay; the same prompt is prefilled again from an empty cache
            eng.extend([0], [prompt])
        sync()
    count, ms, _ = by_category(prof.events())
    graphs = eng.prefill_graph_steps - before >= reps
    timeline = timeline_ms(prof.events(), lambda n: category(n) == "attention")
    del eng
    free()
    kernels = sum(v for k, v in count.items() if k != "copies")
    return dict(prompt_len=len(prompt), reps=reps, mode="graph" if graphs else "eager", kernels=kernels / reps,
                ms={c: ms[c] / reps for c in CATEGORIES}, kernel_ms=sum(ms[c] for c in CATEGORIES if c != "copies") / reps,
                attention_ms=ms["attention"] / reps, attention_timeline_ms=timeline / reps,
                attention_kernels=attention_kernels(prof.events(), reps))


