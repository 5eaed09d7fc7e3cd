"""Our engine timed: prefill and decode throughput at a batch, one prompt's prefill (whole or chunked), the attention
share of a decode step; and `measure`, which records one measurement or its failure."""

from __future__ import annotations

import statistics
import time

import torch

from kselect.gemma4.engine import Engine, EngineConfig
from kselect.measurement.step_profile import free, profile_decode


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


def time_engine(model, groups, prompts, new: int, reps: int, graphs) -> dict:
    b = len(prompts)
    eng = Engine(model, groups, EngineConfig(max_seqs=b, max_seq_len=len(prompts[0]) + new, cuda_graphs=graphs))
    t = time.perf_counter()
    eng.generate(prompts, 3, stop_at_eos=False)  # warm-up: kernel compiles, graph capture
    warm_s = time.perf_counter() - t
    pre, dec, steps = [], [], None
    for _ in range(reps):
        r = eng.generate(prompts, new, stop_at_eos=False)
        pre.append(r.prefill_s)
        dec.append(r.decode_s)
        steps = r.decode_tokens // b
    p, d = statistics.median(pre), statistics.median(dec)
    out = dict(prefill_tok_s=r.prompt_tokens / p, decode_tok_s=b * steps / d, prefill_ms=p * 1e3,
               decode_tok_s_reps=[round(b * steps / x, 2) for x in dec],
               decode_ms_per_step=d / steps * 1e3, decode_steps=steps, reps=reps, warmup_s=round(warm_s, 2),
               cuda_graphs=r.cuda_graphs, prefill_graph_steps=eng.prefill_graph_steps, notes=r.notes,
               kv_cache_gib=round(eng.cache.bytes() / 2**30, 3),
               kernels=eng.backend_names())  # per group, the backend and library build that ran (KSELECT_FA3_BUILD...)
    del eng
    free()
    return out


def time_prefill(model, groups, prompt: list[int], reps: int, chunk: int | None = None) -> dict:
    """One prompt's prefill (B1), whole or in chunks of `chunk` tokens (Engine max_step_tokens)."""
    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1, cuda_graphs=False,
                                             max_step_tokens=chunk))
    eng.generate([prompt], 1, stop_at_eos=False)  # warm-up: kernel compiles
    ts = [eng.generate([prompt], 1, stop_at_eos=False).prefill_s for _ in range(reps)]
    p = statistics.median(ts)
    del eng
    free()
    return dict(prefill_tok_s=len(prompt) / p, prefill_ms=p * 1e3, reps=reps, chunk=chunk)


def profile_attention(model, groups, prompt: list[int], steps: int) -> dict:
    """Device ms per B1 decode step by kernel category (bench/gemma4/fusion.py's profile): the attention
    share is what `kselect explain` predicts from conf/perf. Taken of the CUDA-graph replays the run
    decodes with (kernels named as attention, quant-query included) and of eager steps (every kernel the
    attention backends' forward calls launched, by profiler range); eager alone where a selection does
    not capture graphs or the profiler saw no graph kernels."""
    layers = model.args.num_hidden_layers
    r = profile_decode(model, groups, prompt, steps, layers)
    g = profile_decode(model, groups, prompt, steps, layers, graphs=True)
    graph_ok = g["graphs"] and g["kernels_per_step"] > layers  # replayed, and CUPTI listed the graph's kernels
    main = g if graph_ok else r
    return dict(attention_ms_per_step=main["ms_per_step"]["attention"], kernel_ms_per_step=main["kernel_ms_per_step"],
                kernels_per_step=main["kernels_per_step"], ms_per_step=main["ms_per_step"], mode="graph" if graph_ok else "eager",
                attention_timeline_ms_per_step=main["attention_timeline_ms_per_step"],
                attention_kernels=main["attention_kernels"],  # by name: where explain and the step part
                attention_call_ms_per_step=r["attention_call_ms_per_step"],
                attention_calls_per_step=r["attention_calls_per_step"],
                eager_attention_ms_per_step=r["ms_per_step"]["attention"], steps=steps,
                context=len(prompt) + steps // 2)  # the profiled steps' mean context


@torch.inference_mode()
def timed_s(fn, device) -> float:
    """Seconds one call of fn takes on the device's timeline (CUDA events), or the host's on CPU."""
    if device.type == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(rep, table: str, rec: dict, what: str, log, fn, ok) -> None:
    """One measurement into `rec`, appended to rep.data[table] and saved. A failure is recorded in
    `rec` and logged, not raised (the rest of the run still measures), and memory is freed."""
    try:
        rec.update(fn())
        log(f"{what}: {ok(rec)}")
    except Exception as e:  # noqa: BLE001
        rec["error"] = first_line(e)
        log(f"{what}: FAILED {rec['error']}")
        free()
    rep.data[table].append(rec)
    rep.save()
