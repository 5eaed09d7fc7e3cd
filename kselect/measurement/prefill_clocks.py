"""Where a graphed B1 prefill step's time goes beyond its kernels, and why some rounds are slow (issue #17).

bench/results/h200/graphs4096/README.md: E4B's 4,096-token prefill reads 64-67 ms on CUDA graphs and eager alike
against 59.1 ms of kernels, and 6-19 of 41 rounds land at 69-80 ms. This tool measures, for each selection:

- the step's host phases one by one (each wrapped in device syncs: what the host does before the graph replays
  leaves the device idle, and the engine's clock, CUDA events, counts it);
- one profiled step: the device's busy time (union of its kernels) and its largest idle gaps;
- interleaved rounds as `prefill_rounds.py` runs them, with the GPU's SM clock, power, temperature and clock-event
  reasons sampled by `nvidia-smi` every --sample-ms, attributed to each timed step; then the same rounds with an
  idle --pause-s before every timed step (does an idle GPU come back slower or faster?), and with the garbage
  collector frozen, on torch's default CPU pool (not the engine's one serving thread), without nvidia-smi, or with
  a shorter GIL switch interval; each timed step
  records its host ms in garbage collection and in the graph's fill (and in the fill's block tables, slot mappings
  and replay planning), and the fill's CPU time, context switches and page faults (a stall is work or a wait).

    python -m kselect.measurement.prefill_clocks --out DIR --preset gemma4_e4b --kv auto fp8 --len 4096

Results: DIR/prefill_clocks.json and .md, written after every cell.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import operator
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# nvidia-smi --help-query-gpu: the bits of clocks_event_reasons.active
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "sw power cap", 0x8: "hw slowdown", 0x10: "sync boost",
           0x20: "sw thermal", 0x40: "hw thermal", 0x80: "hw power brake", 0x100: "display clocks"}
FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


def parse_smi(text: str) -> list[dict]:
    """nvidia-smi --format=csv,noheader,nounits lines of FIELDS -> samples (epoch seconds, host local time);
    lines that do not parse (a header, "[N/A]") are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append(dict(t=t, sm=float(parts[1]), mem=float(parts[2]), power=float(parts[3]), temp=float(parts[4]),
                            reasons=int(parts[5], 16)))
        except ValueError:
            continue
    return out


def reason_names(mask: int) -> list[str]:
    return [n for b, n in REASONS.items() if mask & b] + ([f"0x{mask & ~sum(REASONS):x}"] if mask & ~sum(REASONS) else [])


def attribute(steps: list[dict], samples: list[dict]) -> None:
    """Give each step {t0, t1} the samples taken while it ran (or the one nearest its middle): mean and min SM
    clock, max power, max temperature, and the OR of clock-event reasons."""
    for s in steps:
        inside = [x for x in samples if s["t0"] <= x["t"] <= s["t1"]]
        if not inside and samples:
            mid = (s["t0"] + s["t1"]) / 2
            inside = [min(samples, key=lambda x: abs(x["t"] - mid))]
        if not inside:
            continue
        s.update(sm_mean=statistics.fmean(x["sm"] for x in inside), sm_min=min(x["sm"] for x in inside),
                 power_max=max(x["power"] for x in inside), temp_max=max(x["temp"] for x in inside),
                 reasons=reason_names(functools.reduce(operator.or_, (x["reasons"] for x in inside), 0)),
                 samples=len(inside))


def rank_corr(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (no ties correction): does a slower step go with a lower clock?"""
    if len(a) < 3:
        return None
    ra = {i: r for r, i in enumerate(sorted(range(len(a)), key=a.__getitem__))}
    rb = {i: r for r, i in enumerate(sorted(range(len(b)), key=b.__getitem__))}
    n = len(a)
    d2 = sum((ra[i] - rb[i]) ** 2 for i in range(n))
    return 1 - 6 * d2 / (n * (n * n - 1))


def summarize(steps: list[dict], slow_factor: float = 1.05) -> dict:
    """Median step, the slow steps (>= slow_factor x median) and the clocks of slow vs the rest."""
    ms = [s["ms"] for s in steps]
    med = statistics.median(ms)
    slow = [s for s in steps if s["ms"] >= slow_factor * med]
    fast = [s for s in steps if s["ms"] < slow_factor * med]
    have = [s for s in steps if "sm_mean" in s]

    def mean(xs, key, nd):  # None when a step lacks the figure (no nvidia-smi sample)
        return round(statistics.fmean(x[key] for x in xs), nd) if xs and all(key in x for x in xs) else None

    return dict(steps=len(steps), median_ms=round(med, 3), min_ms=round(min(ms), 3), max_ms=round(max(ms), 3),
                slow=len(slow), slow_sm_mhz=mean(slow, "sm_mean", 1), rest_sm_mhz=mean(fast, "sm_mean", 1),
                slow_power_w=mean(slow, "power_max", 1), rest_power_w=mean(fast, "power_max", 1),
                reasons_slow=sorted({r for s in slow for r in s.get("reasons", [])}),
                reasons_rest=sorted({r for s in fast for r in s.get("reasons", [])}),
                rank_corr_ms_vs_sm=rank_corr([s["ms"] for s in have], [s["sm_mean"] for s in have]),
                slow_gc_ms=mean(slow, "gc_ms", 3), rest_gc_ms=mean(fast, "gc_ms", 3),
                slow_fill_ms=mean(slow, "fill_ms", 3), rest_fill_ms=mean(fast, "fill_ms", 3),
                **{f"{p}_ms_slow_rest": (mean(slow, f"{p}_ms", 3), mean(fast, f"{p}_ms", 3)) for p in PARTS},
                **{f"fill_{u}_slow_rest": (mean(slow, f"fill_{u}", 2), mean(fast, f"fill_{u}", 2)) for u in USAGE},
                gen2_steps=sum(1 for s in steps if 2 in s.get("gc_runs", [])),
                slow_gen2_steps=sum(1 for s in slow if 2 in s.get("gc_runs", [])))


def threads_now() -> dict:
    """The process's threads: Python's by name (one wanting the GIL takes it from the step every switch interval,
    5 ms) and the OS's count (CUDA driver, OpenMP pool)."""
    import threading  # noqa: PLC0415

    try:
        os_threads = len(os.listdir("/proc/self/task"))
    except OSError:
        os_threads = None
    return dict(python=sorted(t.name for t in threading.enumerate()), os=os_threads,
                switch_interval_s=sys.getswitchinterval())


def thread_usage() -> dict:
    """This thread's CPU ms, context switches (voluntary: it waited, on a lock, the GIL or a blocking call;
    involuntary: the OS preempted it) and page faults: a host stall with little CPU time was a wait."""
    r = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return dict(cpu_ms=time.thread_time() * 1e3, vcsw=r.ru_nvcsw, ivcsw=r.ru_nivcsw, minflt=r.ru_minflt,
                majflt=r.ru_majflt)


USAGE = ("cpu_ms", "vcsw", "ivcsw", "minflt", "majflt")


class Timed:
    """Wrap methods or functions so each call adds its host ms to `add`, optionally between two device syncs (what
    the call leaves queued counts too); `restore` undoes every wrap."""

    def __init__(self):
        self.undo: list = []

    def wrap(self, owner, name: str, add, sync=None, usage=None) -> None:
        """usage: also called with the call's thread_usage() difference."""
        orig, own = getattr(owner, name), name in vars(owner)

        def timed(*a, **k):
            if sync:
                sync()
            u0 = thread_usage() if usage else None
            t = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                if sync:
                    sync()
                add((time.perf_counter() - t) * 1e3)
                if usage:
                    u1 = thread_usage()
                    usage({k: u1[k] - u0[k] for k in USAGE})

        setattr(owner, name, timed)
        self.undo.append((owner, name, orig if own else None))

    def restore(self) -> None:
        for owner, name, orig in reversed(self.undo):
            if orig is None:
                delattr(owner, name)  # it was inherited (a class's) or bound: the lookup finds it again
            else:
                setattr(owner, name, orig)
        self.undo.clear()


def phase_times(eng, prompt: list[int], reps: int, sync) -> dict:
    """Median ms per host phase of a B1 prefill (generate with 1 new token), each phase synced."""
    import kselect.gemma4.engine as engine_mod  # noqa: PLC0415
    from kselect.gemma4.graphs import PrefillGraph  # noqa: PLC0415

    runs = []
    for _ in range(reps):
        ms, ph = defaultdict(float), Timed()
        for owner, name, label in [(eng, "reset", "reset"), (eng, "reserve", "reserve"),
                                   (eng, "check_tokens", "check_tokens"), (eng, "begin_step", "begin_step"),
                                   (PrefillGraph, "fill", "graph fill (tables, slots, plan)"),
                                   (PrefillGraph, "replay", "graph replay (device)"), (eng, "end_step", "end_step"),
                                   (eng.runner, "logits", "logits"), (engine_mod, "sample", "sample")]:
            ph.wrap(owner, name, lambda x, label=label: ms.__setitem__(label, ms[label] + x), sync)
        try:
            sync()
            t = time.perf_counter()
            r = eng.generate([prompt], 1, stop_at_eos=False)
            total = time.perf_counter() - t
        finally:
            ph.restore()
        row = dict(ms)
        row["other (unwrapped host)"] = total * 1e3 - sum(row.values())
        row["total, synced phases"] = total * 1e3
        row["engine clock (events)"] = r.prefill_s * 1e3
        runs.append(row)
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def busy_profile(eng, prompt: list[int], sync) -> dict:
    """One profiled step: kernels' busy time (union), the span first kernel -> last, the event clock, the 8
    largest idle gaps between kernels."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    from kselect.measurement.profiling import device_kernels  # noqa: PLC0415

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        r = eng.generate([prompt], 1, stop_at_eos=False)
        sync()
    ks = sorted((e.time_range.start, e.time_range.end, e.name) for e in device_kernels(prof.events()))
    if not ks:
        return dict(error="no device events in the profile")
    busy, cur_a, cur_b, gaps = 0.0, ks[0][0], ks[0][1], []
    prev = ks[0]
    for a, b, n in ks[1:]:
        if a > cur_b:
            busy += cur_b - cur_a
            gaps.append((a - cur_b, prev[2][:60], n[:60]))
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
        prev = (a, b, n)
    busy += cur_b - cur_a
    gaps.sort(reverse=True)
    return dict(kernels=len(ks), busy_ms=round(busy / 1e3, 3), span_ms=round((ks[-1][1] - ks[0][0]) / 1e3, 3),
                gaps_ms=round(sum(g for g, _, _ in gaps) / 1e3, 3), engine_clock_ms=round(r.prefill_s * 1e3, 3),
                largest_gaps=[dict(us=round(g, 1), after=a, before=b) for g, a, b in gaps[:8]])


PARTS = ("block_table", "slot_mapping", "prepare_replay")  # the fill's host calls timed on their own


class HostClock:
    """Host time inside the timed step: Python's garbage collections (gc.callbacks) and the prefill graph's fill,
    with its block tables, slot mappings and the backends' replay planning apart (timed without syncs, as it
    runs; the rest of the fill is building its host tensors and copying them to the device)."""

    def __init__(self):
        self.gc_ms = self.fill_ms = 0.0
        self.parts = dict.fromkeys(PARTS, 0.0)
        self.usage = dict.fromkeys(USAGE, 0.0)  # the fill's
        self.gc_runs: list[int] = []
        self._t = None
        self._timed = Timed()

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.gc_ms += (time.perf_counter() - self._t) * 1e3
            self.gc_runs.append(info.get("generation", -1))
            self._t = None

    def reset(self) -> None:
        self.gc_ms = self.fill_ms = 0.0
        self.parts = dict.fromkeys(PARTS, 0.0)
        self.usage = dict.fromkeys(USAGE, 0.0)
        self.gc_runs = []

    def add_usage(self, d: dict) -> None:
        for k, v in d.items():
            self.usage[k] += v

    def __enter__(self):
        from kselect.gemma4.block_manager import GroupBlocks  # noqa: PLC0415
        from kselect.gemma4.model_runner import ModelRunner  # noqa: PLC0415
        from kselect.gemma4.graphs import PrefillGraph  # noqa: PLC0415

        gc.callbacks.append(self.on_gc)
        self._timed.wrap(PrefillGraph, "fill", lambda ms: setattr(self, "fill_ms", self.fill_ms + ms),
                         usage=self.add_usage)
        for owner, name in ((GroupBlocks, "block_table"), (GroupBlocks, "slot_mapping"), (ModelRunner, "prepare_replay")):
            self._timed.wrap(owner, name, lambda ms, n=name: self.parts.__setitem__(n, self.parts[n] + ms))
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self.on_gc)
        self._timed.restore()


def rounds(engines: dict, prompt: list[int], n: int, pause_s: float, sync, warm: int = 1, freeze: bool = False,
           threads: int | None = None, switch_s: float | None = None) -> dict:
    """prefill_rounds.py's rounds (balanced orders, `warm` untimed visits), each timed step stamped on the host's
    wall clock for the nvidia-smi samples, with its garbage-collection and graph-fill host ms; pause_s of idle
    before every timed step; freeze: gc.collect() + gc.freeze() first, as vLLM's workers do after initialization
    (vLLM #44363), undone after; threads: torch's intra-op CPU threads for the rounds; switch_s: Python's GIL
    switch interval for the rounds (both restored after)."""
    import torch  # noqa: PLC0415

    from kselect.measurement.prefill_rounds import visit_order  # noqa: PLC0415

    steps = {k: [] for k in engines}
    before, switch_before = torch.get_num_threads(), sys.getswitchinterval()
    if threads:
        torch.set_num_threads(threads)
    if switch_s:
        sys.setswitchinterval(switch_s)
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        with HostClock() as hc:
            for r, k in visit_order(list(engines), n):
                for _ in range(warm):
                    engines[k].generate([prompt], 1, stop_at_eos=False)
                sync()
                if pause_s:
                    time.sleep(pause_s)
                hc.reset()
                t0 = time.time()
                res = engines[k].generate([prompt], 1, stop_at_eos=False)  # ends with a sync (its clock)
                steps[k].append(dict(round=r, t0=t0, t1=time.time(), ms=res.prefill_s * 1e3,
                                     gc_ms=round(hc.gc_ms, 3), gc_runs=list(hc.gc_runs), fill_ms=round(hc.fill_ms, 3),
                                     **{f"{p}_ms": round(v, 3) for p, v in hc.parts.items()},
                                     **{f"fill_{u}": round(v, 3) for u, v in hc.usage.items()}))
    finally:
        if freeze:
            gc.unfreeze()
        torch.set_num_threads(before)
        sys.setswitchinterval(switch_before)
    return steps


def _num(x) -> str:
    return "" if x is None else f"{x:.2f}"


def render(d: dict) -> str:
    L = ["# Graphed B1 prefill: host phases, device busy time, clocks per round", "",
         f"Command: `{d['env'].get('command')}`", ""]
    for c in d["cells"]:
        L += [f"## {c['preset']} kv={c['kv']} {c['tokens']} tokens", ""]
        if "error" in c:
            L += [f"error: {c['error']}", ""]
            continue
        for s, ph in c["phases"].items():
            L += [f"Host phases, {s} (median of {c['phase_reps']}, ms, each phase between device syncs):", "",
                  "| phase | ms |", "|---|---:|", *[f"| {k} | {v:.3f} |" for k, v in ph.items()], ""]
        for s, p in c["profile"].items():
            L += [f"Profiled step, {s}: {json.dumps({k: v for k, v in p.items() if k != 'largest_gaps'})}", "",
                  *[f"- gap {g['us']} us after `{g['after']}` before `{g['before']}`" for g in p.get("largest_gaps", [])], ""]
        L += ["| rounds | selection | steps | median ms | min | max | slow (>=1.05x) | SM MHz slow / rest | "
              "power W slow / rest | reasons slow | reasons rest | rank corr ms vs SM | GC ms slow / rest | "
              "fill ms slow / rest | tables, slots, plan ms in the step slow / rest | "
              "fill's CPU ms, voluntary / involuntary switches, minor / major faults slow / rest | "
              "steps with a gen-2 GC (slow) |",
              "|" + "---|" * 17]
        for mode, per in c["rounds"].items():
            for s, sm in per.items():
                L.append(f"| {mode} | {s} | {sm['steps']} | {sm['median_ms']} | {sm['min_ms']} | {sm['max_ms']} | "
                         f"{sm['slow']} | {sm['slow_sm_mhz']} / {sm['rest_sm_mhz']} | {sm['slow_power_w']} / "
                         f"{sm['rest_power_w']} | {', '.join(sm['reasons_slow'])} | {', '.join(sm['reasons_rest'])} | "
                         f"{_num(sm['rank_corr_ms_vs_sm'])} | {sm.get('slow_gc_ms')} / {sm.get('rest_gc_ms')} | "
                         f"{sm.get('slow_fill_ms')} / {sm.get('rest_fill_ms')} | "
                         + ", ".join(f"{a} / {b}" for a, b in (sm.get(f"{p}_ms_slow_rest", (None, None)) for p in PARTS))
                         + " | " + ", ".join(f"{a} / {b}" for a, b in (sm.get(f"fill_{u}_slow_rest", (None, None))
                                                                     for u in USAGE))
                         + f" | {sm.get('gen2_steps')} "
                         f"({sm.get('slow_gen2_steps')}) |")
        L += ["", *[f"Threads during `{m}`: Python {t['python']}, OS {t['os']}, GIL switch interval "
                    f"{t['switch_interval_s']} s" for m, t in c.get("threads", {}).items()], ""]
    return "\n".join(L) + "\n"


class Options(BaseModel):
    """The rounds' options, typed: an experiment's `steps.<name>.options` (kselect bench) or the command line."""

    model_config = ConfigDict(extra="forbid")
    out: Path
    preset: str = "gemma4_e4b"
    selections: list[str] = ["vllm", "latency"]
    kv: list[str] = ["auto", "fp8"]
    len: int = 4096
    rounds: int = 60
    pause_rounds: int = 20
    pause_s: float = 0.5
    freeze: bool = True  # also run the back-to-back rounds with the garbage collector frozen (gc.freeze)
    pool: bool = False  # also run them on torch's default intra-op pool, not the engine's serving thread
    unsampled: bool = False  # also run them without nvidia-smi (its driver queries as a cause)
    switch_ms: float = 0.0  # also run them with this GIL switch interval (sys.setswitchinterval)
    phase_reps: int = 5
    sample_ms: int = 20
    rules: str = "vllm_0_33_0"
    platform: str = "auto"


def parser() -> argparse.ArgumentParser:
    """`python -m kselect.measurement.prefill_clocks`: Options' fields as --options (defaults from Options)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset")
    ap.add_argument("--selections", nargs="+")
    ap.add_argument("--kv", nargs="+")
    ap.add_argument("--len", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--pause-rounds", type=int)
    ap.add_argument("--pause-s", type=float)
    ap.add_argument("--freeze", action=argparse.BooleanOptionalAction,
                    help="also run the back-to-back rounds with the garbage collector frozen (gc.freeze)")
    ap.add_argument("--pool", action=argparse.BooleanOptionalAction,
                    help="also run the back-to-back rounds on torch's default intra-op pool (one thread per core), "
                         "not the engine's serving thread (gemma4/host_threads.py)")
    ap.add_argument("--unsampled", action=argparse.BooleanOptionalAction,
                    help="also run the back-to-back rounds without nvidia-smi (its driver queries as a cause)")
    ap.add_argument("--switch-ms", type=float,
                    help="also run the back-to-back rounds with this GIL switch interval (sys.setswitchinterval)")
    ap.add_argument("--phase-reps", type=int)
    ap.add_argument("--sample-ms", type=int)
    ap.add_argument("--rules")
    ap.add_argument("--platform")
    ap.set_defaults(**{k: f.default for k, f in Options.model_fields.items() if k != "out"})
    return ap


def main(argv: list[str]) -> int:
    opts = Options.model_validate(vars(parser().parse_args(argv)))
    return run(opts, " ".join([sys.executable.rsplit("/", 1)[-1], "-m kselect.measurement.prefill_clocks", *argv]))


def round_modes(opts: Options, pool: int) -> list[tuple]:
    """(name, rounds, pause s, gc frozen, threads, GIL switch s, nvidia-smi sampled) of each mode the options ask
    for, in the order they run."""
    b2b = opts.rounds
    modes = [("back to back", b2b, 0.0, False, None, None, True),
             ("back to back, gc frozen", b2b if opts.freeze else 0, 0.0, True, None, None, True),
             (f"back to back, {pool} CPU threads", b2b if opts.pool else 0, 0.0, False, pool, None, True),
             ("back to back, no nvidia-smi", b2b if opts.unsampled else 0, 0.0, False, None, None, False),
             (f"back to back, GIL switch {opts.switch_ms} ms", b2b if opts.switch_ms else 0, 0.0, False, None,
              opts.switch_ms / 1e3, True),
             (f"pause {opts.pause_s} s", opts.pause_rounds, opts.pause_s, False, None, None, True)]
    return [m for m in modes if m[1] >= 1]


def sampled_rounds(opts: Options, engines: dict, prompt: list[int], mode: tuple, sync) -> tuple[dict, str]:
    """One mode's rounds with nvidia-smi sampling the clocks beside them (where the mode samples and a driver
    answers): ({selection: its timed steps}, the raw samples)."""
    _, n, pause, freeze, threads, switch_s, sampled = mode
    smi = None
    try:
        if sampled:
            smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                    f"-lms={opts.sample_ms}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
    except FileNotFoundError:  # no NVIDIA driver here: rounds without clocks
        smi = None
    time.sleep(0.3)
    try:
        steps = rounds(engines, prompt, n, pause, sync, freeze=freeze, threads=threads, switch_s=switch_s)
    finally:
        time.sleep(0.1)
        text = ""
        if smi is not None:
            smi.terminate()
            text = smi.communicate(timeout=10)[0]
    return steps, text


def _engines(opts: Options, model, base: list[str], kv: str, prompt: list[int], cell: dict, sync) -> dict:
    """{selection: its warmed engine} for one KV dtype; each selection's backends, phase times and busy profile
    into the cell."""
    from kselect.measurement.e2e import describe, selection_overrides  # noqa: PLC0415
    from kselect.gemma4.build import select  # noqa: PLC0415
    from kselect.gemma4.engine import Engine, EngineConfig, model_groups  # noqa: PLC0415

    engines = {}
    for s in opts.selections:
        _, sel = select(base + [f"kv_cache={kv}", *selection_overrides(s, opts.rules)])
        groups = model_groups(sel)
        cell["backends"][s] = describe(groups)
        eng = engines[s] = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=opts.len + 1,
                                                              prefill_graph_tokens=4096))
        for _ in range(3):  # compiles, plans, the graph's capture
            eng.generate([prompt], 1, stop_at_eos=False)
        cell["phases"][s] = phase_times(eng, prompt, opts.phase_reps, sync)
        cell["profile"][s] = busy_profile(eng, prompt, sync)
        print(f"kv={kv} {s}: phases {cell['phases'][s]}\n  profile {cell['profile'][s]}", flush=True)
    return engines


def _cell(opts: Options, model, base: list[str], kv: str, prompt: list[int], pool: int, d: dict, save, sync) -> None:
    """One KV dtype's cell: the engines, then every round mode; saved after each; an error ends the cell, recorded."""
    cell = dict(preset=opts.preset, kv=kv, tokens=opts.len, phase_reps=opts.phase_reps, backends={}, phases={},
                profile={}, rounds={})
    engines = {}
    try:
        engines = _engines(opts, model, base, kv, prompt, cell, sync)
        d["cells"].append(cell)
        save()
        smi_text = []
        for mode in round_modes(opts, pool):
            name = mode[0]
            steps, text = sampled_rounds(opts, engines, prompt, mode, sync)
            samples = parse_smi(text)
            smi_text.append(f"# {name}\n{text}")
            save(f"smi_{kv}.csv", "".join(smi_text))  # raw samples, for a reader to re-attribute
            for st in steps.values():
                attribute(st, samples)
            cell["rounds"][name] = {s: summarize(st) for s, st in steps.items()}
            cell.setdefault("threads", {})[name] = threads_now()
            cell.setdefault("steps", {})[name] = steps
            cell.setdefault("smi_samples", {})[name] = len(samples)
            print(f"kv={kv} {name}: {len(samples)} smi samples; {cell['rounds'][name]}", flush=True)
            save()
    except Exception as e:  # noqa: BLE001
        cell["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        print(f"kv={kv}: error {cell['error']}", flush=True)
        if cell not in d["cells"]:
            d["cells"].append(cell)
        save()
    engines.clear()


def run(opts: Options, command: str) -> int:
    """The rounds on typed options; `command` is what the record keeps as the run's command."""

    import torch  # noqa: PLC0415
    from kselect.measurement.e2e import environment, free  # noqa: PLC0415

    pool = torch.get_num_threads()  # torch's default, before an engine on a GPU serves on one

    from kselect.gemma4.build import build_model, select  # noqa: PLC0415
    from kselect.selector.base.files import atomic_write  # noqa: PLC0415

    opts.out.mkdir(parents=True, exist_ok=True)
    d = dict(env=environment([], command=command), cells=[])

    def save(name: str | None = None, text: str | None = None):
        """The record (json and md), or one named file of the output folder."""
        if name is not None:
            atomic_write(opts.out / name, text)
            return
        atomic_write(opts.out / "prefill_clocks.json", json.dumps(d, indent=1))
        atomic_write(opts.out / "prefill_clocks.md", render(d))

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)  # CPU: a dry run of the flow
    base = [f"platform={opts.platform}", f"model={opts.preset}"]
    cfg0, _ = select(base)
    model, _, _ = build_model(cfg0, 0)
    prompt = torch.randint(3, model.args.vocab_size, (opts.len,), generator=torch.Generator().manual_seed(1)).tolist()
    for kv in opts.kv:
        _cell(opts, model, base, kv, prompt, pool, d, save, sync)
        free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
