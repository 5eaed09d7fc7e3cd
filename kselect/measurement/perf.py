"""`kselect perf`: time the kernel behind every verified conformance claim over shape buckets and
merge the results into `conf/perf/<gpu_model>.yaml` (schema: selector/evidence/perf_data.py).

    kselect perf --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b \\
        --decode 1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --warm-jobs 8

Targets: for each model's sliding group (its head size, KV heads and window) and full group, every
kernel path whose conformance claim `<path>:<kv>:d<head>:window` (sliding) or `:causal` (full) is
verified in conf/conformance/<gpu>.yaml, for each KV dtype, at the claim's own page and every page
the objective can run it at (selector/measure/reachable.py, `--rules`, up to `--max-page`). Each target is built like the engine
builds it (backends.make_backend over a hand-made GroupSelection) and timed per bucket:
decode = B sequences x 1 new token over C cached tokens; prefill = B fresh prompts of C tokens.
On CUDA: R rotated input sets (R so they exceed 4x L2) captured as one CUDA graph (FlashInfer
re-planned through prepare_replay as under the engine's graphs), median of --reps replays; with
`--context-spread F` the decode sets run contexts spread over C x (1 +- F), a figure for a range. On CPU
(tests): eager calls timed with perf_counter, graph=false in the entry. Sliding decode allocates
only the pages the window reaches. `--warm-jobs N` first runs every target once on a tiny shape in
N processes, so JIT compiles (FlashInfer, FA4, Triton) overlap and land in their disk caches before
the timed pass, which runs in this process, one kernel at a time, on the intra-op CPU threads an engine
on that device serves with (gemma4/host_threads.py: one on a GPU), so host_ms and plan_ms are the engine's.
The file is merged and written atomically after every target, so a timeout keeps what was measured. Its
`kernel_versions` name the kernel library versions the entries ran with, merged with what the file named
before (kselect/measurement/measured_versions.py).
"""

from __future__ import annotations

import datetime
import importlib.metadata as md
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kselect.measurement import measured_versions
from kselect.measurement.perf_targets import Target, bucket_of, make_target_backend, parse_grid, targets, verified_claims
from kselect.measurement.perf_timing import make_inputs, parse_fence, time_bucket
from kselect.selector.evidence import perf_data as perfdata
from kselect.selector.evidence.conformance_data import CONFORMANCE_DIR
from kselect.selector.base.errors import KSelectError

_PKG = {"FLASHINFER": "flashinfer-python", "FLASH_ATTN_v4": "flash-attn-4", "FLASH_ATTN_v3": "vllm", "TRITON_ATTN": "triton"}


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


# ---------------------------------------------------------------- the run


def _lacking(e: perfdata.PerfEntry | None) -> str | None:
    """What --missing re-times a bucket for: no entry, or a prefill entry without the host time (or, graph-timed,
    the backend's plan time) that the objective's request figures read."""
    if e is None:
        return "absent"
    if e.phase == "prefill" and not e.host_ms:
        return "no host_ms"
    if e.phase == "prefill" and e.graph and e.plan_ms is None:
        return "no plan_ms"
    return None


@dataclass(frozen=True)
class PerfRun:
    """What `kselect perf` times (kselect/commands/perf.py maps its flags, with their help, to these fields)."""

    gpu_name: str  # GPU model key, e.g. nvidia_h200
    conformance: str | None = None  # default conf/conformance/<gpu_name>.yaml
    out: str | None = None  # default conf/perf/<gpu_name>.yaml; merged, atomic
    models: str = "gemma4_31b"  # comma-separated conf/model names
    decode: str = "1x1024,1x8192,16x1024,16x8192,64x1024,64x8192"  # BxC buckets
    prefill: str = "1x512,1x4096"  # BxC buckets (C = prompt tokens)
    kernels: str = ""  # only these paths
    kv: str = ""  # only these KV dtypes
    reps: int | None = None  # default 3 on CPU, 10 on CUDA
    device: str | None = None  # default: cuda where available, else cpu
    warm_jobs: int = 0
    budget_s: float = 1e9
    platform: str | None = None
    rules: str = ""
    fence: str = ""  # KIND:MIB (perf_timing.parse_fence)
    context_spread: float = 0.0
    max_page: int = 128
    missing: bool = False
    dry_run: bool = False


def _names(s: str) -> set[str] | None:
    return {x.strip() for x in s.split(",") if x.strip()} or None


@dataclass
class _Plan:
    conf: Path  # the conformance file whose verified claims are timed
    out: Path  # the perf file
    targets: list[Target]
    todo: dict  # target -> its (phase, batch, context) buckets to time
    lacks: dict  # bucket -> what the file lacks of it (absent, or a field a prefill entry needs)
    grid: list[tuple[str, int, int]]


def _plan(opts: PerfRun) -> _Plan:
    """The targets and buckets to time: the verified claims' kernels, less what --missing finds in the file."""
    conf = Path(opts.conformance) if opts.conformance else CONFORMANCE_DIR / f"{opts.gpu_name}.yaml"
    out = Path(opts.out) if opts.out else perfdata.PERF_DIR / f"{opts.gpu_name}.yaml"
    platform = opts.platform or ("cpu" if opts.device == "cpu" else "auto")
    verified = verified_claims(conf)
    for flag, named, field in (("--kernels", _names(opts.kernels), 0), ("--kv", _names(opts.kv), 1)):
        known = {cid.split(":")[field] for cid in verified}
        if named and named - known:  # a typo would time nothing and still write the file
            raise KSelectError(f"{flag} {', '.join(sorted(named - known))}: no verified claim in {conf} has "
                               f"it; allowed: {', '.join(sorted(known))}")
    ts = targets(verified, [m for m in opts.models.split(",") if m], _names(opts.kernels), _names(opts.kv), platform,
                 tuple(sorted(_names(opts.rules) or ())), opts.max_page)
    grid = [("decode", b, c) for b, c in parse_grid(opts.decode)] + [("prefill", b, c) for b, c in parse_grid(opts.prefill)]
    old = perfdata.load(out.stem, out.parent) if opts.missing and out.exists() else None
    lacks = {}
    for t in ts:
        for ph, b, c in grid:
            lack = _lacking(old.entries.get(bucket_of(t, ph, b, c)) if old else None) if opts.missing else "absent"
            if lack:
                lacks[bucket_of(t, ph, b, c)] = lack
    todo = {t: [(ph, b, c) for ph, b, c in grid if bucket_of(t, ph, b, c) in lacks] for t in ts}
    return _Plan(conf, out, [t for t in ts if todo[t]], todo, lacks, grid)


def _check_numbers(opts: PerfRun) -> None:
    """The numeric flags within what a timing can mean (a spread of 5 reads contexts below zero, 0 reps no time)."""
    checks = (("--reps", opts.reps, opts.reps is None or 1 <= opts.reps <= 1000, "1 to 1000"),
              ("--warm-jobs", opts.warm_jobs, 0 <= opts.warm_jobs <= 64, "0 to 64"),
              ("--budget-s", opts.budget_s, opts.budget_s > 0, "more than 0 seconds"),
              ("--context-spread", opts.context_spread, 0 <= opts.context_spread < 1, "0 (one context) up to, not "
               "including, 1 (a fraction of each bucket's context)"),
              ("--max-page", opts.max_page, 1 <= opts.max_page <= 4096, "1 to 4096 tokens"))
    for flag, value, ok, allowed in checks:
        if not ok:
            raise KSelectError(f"{flag} {value}; allowed: {allowed}")


def run(opts: PerfRun, command: str) -> int:
    """Time the plan's buckets and merge them into the perf file after each target; `command` is recorded there."""
    from kselect.selector.base.files import safe_name

    safe_name(opts.gpu_name, "--gpu-name")  # it names files in conf/
    _check_numbers(opts)
    try:
        fence = parse_fence(opts.fence)
    except ValueError as e:
        print(f"kselect perf: {e}", file=sys.stderr)
        return 2
    if opts.device is None and not (opts.dry_run and opts.platform):
        import torch

        opts = replace(opts, device="cuda" if torch.cuda.is_available() else "cpu")
    if fence and opts.device == "cpu":
        print("kselect perf: --fence applies to CUDA-graph timing only; CPU entries are timed back to back (fence \"\")",
              file=sys.stderr)
    if opts.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    conf = Path(opts.conformance) if opts.conformance else CONFORMANCE_DIR / f"{opts.gpu_name}.yaml"
    if not conf.exists():
        print(f"kselect perf: no conformance file {conf}: run `kselect conformance` first (only verified claims are timed)",
              file=sys.stderr)
        return 2
    plan = _plan(opts)
    if opts.missing:
        print(f"--missing: {sum(map(len, plan.todo.values()))} buckets of {len(plan.targets)} targets not in {plan.out}",
              flush=True)
    print(f"{len(plan.targets)} targets x {len(plan.grid)} buckets from {plan.conf}", flush=True)
    if opts.dry_run:
        for t in plan.targets:
            for phase, b, c in plan.todo[t]:
                bucket = bucket_of(t, phase, b, c)
                print(f"would time {bucket}" + (f" ({plan.lacks[bucket]})" if opts.missing else ""))
        return 0
    _time_plan(opts, plan, fence, command)
    return 0


def _time_plan(opts: PerfRun, plan: _Plan, fence, command: str) -> None:
    import torch

    from kselect.gemma4.host_threads import use_serving_threads

    # host_ms and plan_ms on the intra-op threads an engine on this device serves with (one on a GPU)
    print(f"intra-op CPU threads: {use_serving_threads(opts.device)}", flush=True)
    t0 = time.monotonic()
    if opts.warm_jobs > 0 and opts.device != "cpu":
        warm_up(plan.targets, opts.device, opts.warm_jobs)
        print(f"warm-up {time.monotonic() - t0:.0f} s", flush=True)
    header = dict(gpu=opts.gpu_name, torch=str(torch.__version__), measured=datetime.date.today().isoformat(),
                  commit=_git_commit(), command=command)
    out = plan.out
    before = perfdata.load(out.stem, out.parent) if out.exists() else None  # its kernel_versions are merged, not dropped
    have = measured_versions.installed()  # the kernel libraries here (metadata only: no imports)
    timed: dict[str, perfdata.PerfEntry] = {}  # this run's entries, across targets
    for t in plan.targets:
        if time.monotonic() - t0 > opts.budget_s:
            print(f"budget: skipped {t}", flush=True)
            continue
        entries = _time_target(opts, t, plan.todo[t], fence, header["measured"])
        if entries:
            timed.update(entries)
            header["kernel_versions"] = kernel_versions(before, timed, have)
            perfdata.merge_write(out, header, entries)
    print(f"wrote {out} ({time.monotonic() - t0:.0f} s)", flush=True)


def _time_target(opts: PerfRun, t: Target, buckets: list, fence, today: str) -> dict[str, perfdata.PerfEntry]:
    """One target's entries, by bucket; a bucket that fails is left out (recorded as missing, never guessed)."""
    import torch

    try:
        be = make_target_backend(t)
    except Exception as e:  # noqa: BLE001 - a verified claim whose kernel will not build here: say so
        print(f"{t.path}:{t.kv}:d{t.head}:p{t.page}: cannot build: {type(e).__name__}: {e}", flush=True)
        return {}
    build = be.kernel_build or t.path
    reps = opts.reps or (3 if opts.device == "cpu" else 10)
    entries = {}
    for phase, b, c in buckets:
        try:
            ms, graph, host, plan = time_bucket(be, t, phase, b, c, opts.device, reps, opts.context_spread, fence)
        except Exception as e:  # noqa: BLE001 - recorded as missing (no entry), never guessed
            print(f"{t.path}:{t.kv}:d{t.head}:p{t.page} {phase} b{b} c{c}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            if opts.device != "cpu":
                torch.cuda.empty_cache()
            continue
        e = perfdata.PerfEntry(kernel=t.path, build=build, versions={**versions(t), **be.kernel_versions}, kv=t.kv, head=t.head, window=t.window,
                               phase=phase, batch=b, context=c, num_q_heads=t.hq, num_kv_heads=t.hkv, page=t.page,
                               ms=float(f"{ms:.4g}"), host_ms=float(f"{host:.4g}") if host else None,
                               plan_ms=float(f"{plan:.4g}") if plan is not None else None, graph=graph,
                               context_spread=opts.context_spread if phase == "decode" else 0.0,
                               fence=f"{fence[0]}:{fence[1]}" if fence and graph else "",
                               gpu=opts.gpu_name, date=today)
        entries[e.bucket] = e
        print(f"{e.bucket:64s} {ms:9.4f} ms{' graph' if graph else ''}{f'  host {host:.4f} ms' if host else ''}"
              f"{f'  plan {plan:.4f} ms' if plan is not None else ''}", flush=True)
        if opts.device != "cpu":
            torch.cuda.empty_cache()
    return entries


def _records(entries) -> list[tuple[str, str, dict]]:
    return [(e.kernel, e.build, e.versions) for e in entries]


def kernel_versions(before: perfdata.PerfFile | None, timed: dict, have: dict | None = None) -> dict[str, str]:
    """The file's `kernel_versions` once `timed` (this run's entries) are merged over `before` (the file as this
    run found it): kselect/measurement/measured_versions.py."""
    kept = [e for b, e in (before.entries.items() if before else ()) if b not in timed]
    return measured_versions.merge(before.kernel_versions if before else {},
                                   measured_versions.run_versions(_records(timed.values()), have),
                                   measured_versions.used(_records(kept)))


def _git_commit() -> str:
    """kselect's own commit, short (kselect/provenance.py: KSELECT_COMMIT names a copied tree's)."""
    from kselect.provenance import project_commit

    return project_commit()["commit"][:7]
