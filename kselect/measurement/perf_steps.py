"""`kselect perf-steps`: is the model's prefill step, as the engine runs it, bound by the host or by the GPU?

    kselect perf-steps --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b --prefill 512,4096

For each model (seeded random weights, vLLM's own selection, model-dtype cache) and prompt length:
the host wall time of a B1 prefill step as the engine runs it (median of --reps; a one-sequence step of up
to 2,048 tokens replays a CUDA graph, gemma4/graphs.py, so it waits on no host), the device time of
its kernels and the part of it in the attention backends' calls (one profiled eager step: the same kernels). Merged into conf/perf/<gpu>.yaml
`steps` (selector/evidence/perf_data.py StepEntry), atomically. The objective reads them: in a host-bound step an
attention call costs at least its host time (`kselect perf` host_ms), in a GPU-bound one its kernels.
"""

from __future__ import annotations

import datetime
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kselect.selector.evidence import perf_data as perfdata


def measure(model, groups, prompt: list[int], reps: int) -> tuple[float, float, float, str, bool]:
    """(wall ms, kernel ms, attention kernel ms, backends, whether the timed steps replayed a graph) of one B1
    prefill step: wall as the engine runs it, kernels from one profiled eager step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kselect.gemma4.engine import Engine, EngineConfig
    from kselect.measurement.profiling import ATTENTION_RANGE as ATTENTION
    from kselect.measurement.profiling import device_kernels, device_ms, in_range, in_range_ms

    run = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1))
    for _ in range(2):  # compiles, plans, captures
        run.generate([prompt], 1, stop_at_eos=False)
    torch.cuda.synchronize()
    walls, before = [], run.prefill_graph_steps
    for _ in range(reps):
        walls.append(run.generate([prompt], 1, stop_at_eos=False).prefill_s * 1e3)
    graphs = run.prefill_graph_steps - before == reps
    del run
    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1, cuda_graphs=False))
    eng.generate([prompt], 1, stop_at_eos=False)
    with in_range(eng.backends.values(), "forward", ATTENTION), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        eng.generate([prompt], 1, stop_at_eos=False)
        torch.cuda.synchronize()
    ev = prof.events()
    kernels = sum(device_ms(e) for e in device_kernels(ev) if not e.name.lower().startswith(("memcpy", "memset")))
    _, attention = in_range_ms(ev, ATTENTION)
    names = "; ".join(f"{k}: {v}" for k, v in eng.backend_names().items())
    del eng
    return statistics.median(walls), kernels, attention, names, graphs


@dataclass(frozen=True)
class PerfStepsRun:
    """What `kselect perf-steps` measures (kselect/commands/perf_steps.py maps its flags to these fields)."""

    gpu_name: str  # GPU model key, e.g. nvidia_h200
    out: str | None = None  # default conf/perf/<gpu_name>.yaml; merged, atomic
    models: str = "gemma4_31b"  # comma-separated conf/model names
    prefill: str = "512,4096"  # comma-separated prompt lengths (B1)
    reps: int = 5
    platform: str = "auto"


def run(opts: PerfStepsRun, command: str) -> int:
    """Each model's B1 prefill steps merged into the perf file's `steps`; `command` is recorded there."""
    import torch

    from kselect.measurement.perf import _git_commit
    from kselect.selector.base.files import safe_name

    safe_name(opts.gpu_name, "--gpu-name")
    if not torch.cuda.is_available():
        print("kselect perf-steps: needs a CUDA GPU (it times the model's steps on it)", file=sys.stderr)
        return 2
    try:
        lens = [int(x) for x in opts.prefill.split(",") if x.strip()]
    except ValueError:
        print(f"kselect perf-steps: --prefill {opts.prefill!r}: comma-separated prompt lengths, e.g. 512,4096",
              file=sys.stderr)
        return 2
    out = Path(opts.out) if opts.out else perfdata.PERF_DIR / f"{opts.gpu_name}.yaml"
    today = datetime.date.today().isoformat()
    header = dict(gpu=opts.gpu_name, torch=str(torch.__version__), measured=today, commit=_git_commit(), command=command)
    old = perfdata.load(out.stem, out.parent) if out.exists() else None
    if old:  # the header describes the kernel runner's pass; this run only adds steps (each dated, versioned)
        header.update(command=old.command, commit=old.commit, kernel_versions=old.kernel_versions)
    gen = torch.Generator().manual_seed(1)
    for name in [m for m in opts.models.split(",") if m]:
        perfdata.merge_write(out, header, {}, _model_steps(opts, name, lens, gen, today))
        torch.cuda.empty_cache()
    print(f"wrote {out}", flush=True)
    return 0


def _model_steps(opts: PerfStepsRun, name: str, lens: list[int], gen, today: str) -> dict:
    """One model's step entries, by key: a B1 prefill step of each prompt length."""
    import torch

    from kselect.gemma4.build import build_model, select
    from kselect.gemma4.engine import model_groups

    vers = {"torch": str(torch.__version__), "cuda": str(torch.version.cuda)}
    cfg, sel = select([f"platform={opts.platform}", f"model={name}"])
    model, _, _ = build_model(cfg, 0)
    steps = {}
    for n in lens:
        prompt = torch.randint(3, model.args.vocab_size, (n,), generator=gen).tolist()
        t0 = time.monotonic()
        wall, kern, att, names, graphs = measure(model, model_groups(sel), prompt, opts.reps)
        st = perfdata.StepEntry(model=name, phase="prefill", batch=1, context=n, backends=names, graphs=graphs,
                                wall_ms=float(f"{wall:.4g}"), kernel_ms=float(f"{kern:.4g}"),
                                attention_ms=float(f"{att:.4g}"), versions=vers, gpu=opts.gpu_name, date=today)
        steps[st.key] = st
        print(f"{st.key:32s} wall {wall:8.2f} ms  kernels {kern:8.2f} ms  attention {att:7.2f} ms  "
              f"{'HOST-BOUND' if st.host_bound else 'gpu-bound'}{' (graph)' if graphs else ''}  ({time.monotonic() - t0:.0f} s)", flush=True)
    del model
    return steps
