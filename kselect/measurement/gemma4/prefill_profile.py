"""Where an eager prefill step's time goes (issues #16, #17): the host's wall time, the device's
busy time by kernel category, the host calls that wait for the device, and the Python functions
that cost the host the most (cProfile), per selection and prompt length, batch 1.

    python -m kselect.measurement.gemma4.prefill_profile --out DIR --platform auto --presets gemma4_e4b \
        --selections vllm latency --lens 512 4096

A step whose device busy time is far below its wall time is host-bound: a faster attention kernel
cannot show through it. Results: DIR/prefill_profile.json and .md (written after every cell).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import torch

from kselect.measurement.e2e import SELECTIONS, describe, environment, free, selection_overrides
from kselect.measurement.profiling import device_kernels
from kselect.measurement.step_profile import CATEGORIES, category, sync

from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, model_groups
from kselect.selector.base.files import atomic_write

WAITS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}  # host blocks


def one_prefill(eng: Engine, prompt: list[int]) -> None:
    eng.generate([prompt], 1, stop_at_eos=False)


def cell(model, groups, prompt: list[int], reps: int) -> dict:
    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1, cuda_graphs=False))
    for _ in range(2):  # compiles, plans
        one_prefill(eng, prompt)
    sync()
    wall, dev = [], []
    for _ in range(reps):
        t = time.perf_counter()
        r = eng.generate([prompt], 1, stop_at_eos=False)  # ends with a device sync (its clock)
        wall.append(time.perf_counter() - t)
        dev.append(r.prefill_s)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        one_prefill(eng, prompt)
        sync()
    ms, count = dict.fromkeys(CATEGORIES, 0.0), dict.fromkeys(CATEGORIES, 0)
    waits: dict[str, int] = {}
    spans = []
    kernels = {id(e) for e in device_kernels(prof.events())}
    for e in prof.events():
        if id(e) in kernels:
            c = category(e.name)
            d = (e.device_time if hasattr(e, "device_time") else e.cuda_time) / 1e3
            ms[c] += d
            count[c] += 1
            spans.append((e.time_range.start, e.time_range.end))
        elif e.name in WAITS:
            waits[e.name] = waits.get(e.name, 0) + 1
    first, last = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)
    top_ops = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:20]
    pr = cProfile.Profile()
    pr.enable()
    one_prefill(eng, prompt)
    sync()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    del eng
    free()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return dict(
        tokens=len(prompt), wall_ms=med(wall) * 1e3, device_clock_ms=med(dev) * 1e3,
        kernel_ms=sum(v for k, v in ms.items() if k != "copies"), ms_by_category=ms, kernels=count,
        device_span_ms=(last - first) / 1e3, host_waits=waits,
        top_host_ops=[dict(name=a.key, calls=a.count, self_cpu_ms=a.self_cpu_time_total / 1e3) for a in top_ops],
        cprofile=s.getvalue().splitlines()[:60])


def render(d: dict) -> str:
    L = ["# Eager prefill step profile (B1)", "", f"Command: `{d['env'].get('command')}`", "",
         "| preset | selection | kv | tokens | wall ms | device clock ms | kernel ms | gemm | attention | norm | "
         "elementwise | copies | kernels | host waits |", "|" + "---|" * 14]
    for c in d["cells"]:
        if "error" in c:
            L.append(f"| {c['preset']} | {c['selection']} | {c['kv']} | {c.get('tokens', '')} | error: {c['error']} |")
            continue
        m = c["ms_by_category"]
        L.append(f"| {c['preset']} | {c['selection']} | {c['kv']} | {c['tokens']} | {c['wall_ms']:.1f} | "
                 f"{c['device_clock_ms']:.1f} | {c['kernel_ms']:.1f} | " + " | ".join(f"{m[k]:.2f}" for k in CATEGORIES)
                 + f" | {sum(c['kernels'].values())} | {sum(c['host_waits'].values())} |")
    for c in d["cells"]:
        if "error" in c:
            continue
        L += ["", f"## {c['preset']} {c['selection']} kv={c['kv']} {c['tokens']} tokens", "",
              f"backends: {c['backends']}", "", f"host waits: {c['host_waits']}", "", "```",
              *[f"{o['self_cpu_ms']:9.2f} ms {o['calls']:6d}x  {o['name'][:90]}" for o in c["top_host_ops"]], "```",
              "", "```", *c["cprofile"][:45], "```"]
    return "\n".join(L) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--presets", nargs="+", default=["gemma4_e4b"])
    ap.add_argument("--selections", nargs="+", default=["vllm", "latency"], choices=list(SELECTIONS))
    ap.add_argument("--kv", nargs="+", default=["auto"])
    ap.add_argument("--lens", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rules", default="vllm_0_33_0")
    ap.add_argument("--platform", default="auto")
    opts = ap.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    d = dict(env=environment(argv, "-m kselect.measurement.gemma4.prefill_profile"), cells=[])

    def save():
        atomic_write(opts.out / "prefill_profile.json", json.dumps(d, indent=1))
        atomic_write(opts.out / "prefill_profile.md", render(d))

    gen = torch.Generator().manual_seed(1)
    for preset in opts.presets:
        base = [f"platform={opts.platform}", f"model={preset}"]
        cfg0, _ = select(base)
        model, _, _ = build_model(cfg0, 0)
        for sname in opts.selections:
            for kv in opts.kv:
                over = selection_overrides(sname, opts.rules)
                for n in opts.lens:
                    row = dict(preset=preset, selection=sname, kv=kv)
                    try:
                        _, sel = select(base + [f"kv_cache={kv}", *over])
                        groups = model_groups(sel)
                        row["backends"] = describe(groups)
                        prompt = torch.randint(3, model.args.vocab_size, (n,), generator=gen).tolist()
                        row.update(cell(model, groups, prompt, opts.reps))
                        print(f"{preset} {sname} kv={kv} {n}: wall {row['wall_ms']:.1f} ms, device clock "
                              f"{row['device_clock_ms']:.1f}, kernels {row['kernel_ms']:.1f} ms, waits "
                              f"{sum(row['host_waits'].values())}", flush=True)
                    except Exception as e:  # noqa: BLE001
                        row["error"] = str(e).splitlines()[0][:300]
                        print(f"{preset} {sname} kv={kv} {n}: error {row['error']}", flush=True)
                        free()
                    d["cells"].append(row)
                    save()
        del model
        free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
