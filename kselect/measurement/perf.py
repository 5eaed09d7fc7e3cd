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

import argparse
import datetime
import importlib.metadata as md
import os
import sys
import time
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


# ---------------------------------------------------------------- main


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


def main(argv: list[str] | None = None) -> int:
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
    ap.add_argument("--device", default=None, help="default: cuda where available, else cpu")
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
    ap.add_argument("--dry-run", action="store_true", help="list the buckets this command would time (with --missing: "
                    "what the file lacks) and exit; times nothing, writes nothing, needs no GPU with --platform")
    args = ap.parse_args(argv)
    from kselect.selector.base.files import safe_name

    safe_name(args.gpu_name, "--gpu-name")  # it names files in conf/
    try:
        fence = parse_fence(args.fence)
    except ValueError as e:
        print(f"kselect perf: {e}", file=sys.stderr)
        return 2
    if args.device is None and not (args.dry_run and args.platform):
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
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
    verified = verified_claims(conf)
    for flag, named, field in (("--kernels", split(args.kernels), 0), ("--kv", split(args.kv), 1)):
        known = {cid.split(":")[field] for cid in verified}
        if named and named - known:  # a typo would time nothing and still write the file
            raise KSelectError(f"{flag} {', '.join(sorted(named - known))}: no verified claim in {conf} has "
                               f"it; allowed: {', '.join(sorted(known))}")
    ts = targets(verified, [m for m in args.models.split(",") if m], split(args.kernels), split(args.kv), platform,
                 tuple(sorted(split(args.rules) or ())), args.max_page)
    grid = [("decode", b, c) for b, c in parse_grid(args.decode)] + [("prefill", b, c) for b, c in parse_grid(args.prefill)]
    reps = args.reps or (3 if args.device == "cpu" else 10)
    old = perfdata.load(out.stem, out.parent) if args.missing and out.exists() else None
    lacks = {}  # bucket -> what the file lacks of it (absent, or a field a prefill entry needs)
    for t in ts:
        for ph, b, c in grid:
            lack = _lacking(old.entries.get(bucket_of(t, ph, b, c)) if old else None) if args.missing else "absent"
            if lack:
                lacks[bucket_of(t, ph, b, c)] = lack
    todo = {t: [(ph, b, c) for ph, b, c in grid if bucket_of(t, ph, b, c) in lacks] for t in ts}
    ts = [t for t in ts if todo[t]]
    if args.missing:
        print(f"--missing: {sum(map(len, todo.values()))} buckets of {len(ts)} targets not in {out}", flush=True)
    print(f"{len(ts)} targets x {len(grid)} buckets from {conf}", flush=True)
    if args.dry_run:
        for t in ts:
            for phase, b, c in todo[t]:
                print(f"would time {bucket_of(t, phase, b, c)}" + (f" ({lacks[bucket_of(t, phase, b, c)]})" if args.missing else ""))
        return 0
    import torch

    from kselect.gemma4.host_threads import use_serving_threads

    # host_ms and plan_ms on the intra-op threads an engine on this device serves with (one on a GPU)
    print(f"intra-op CPU threads: {use_serving_threads(args.device)}", flush=True)
    t0 = time.monotonic()
    if args.warm_jobs > 0 and args.device != "cpu":
        warm_up(ts, args.device, args.warm_jobs)
        print(f"warm-up {time.monotonic() - t0:.0f} s", flush=True)
    header = dict(gpu=args.gpu_name, torch=str(torch.__version__), measured=datetime.date.today().isoformat(),
                  commit=_git_commit(), command="kselect perf " + " ".join(sys.argv[1:] if argv is None else argv))
    today = header["measured"]
    before = perfdata.load(out.stem, out.parent) if out.exists() else None  # its kernel_versions are merged, not dropped
    have = measured_versions.installed()  # the kernel libraries here (metadata only: no imports)
    timed: dict[str, perfdata.PerfEntry] = {}  # this run's entries, across targets
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
            e = perfdata.PerfEntry(kernel=t.path, build=build, versions={**versions(t), **be.kernel_versions}, kv=t.kv, head=t.head, window=t.window,
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
            timed.update(entries)
            header["kernel_versions"] = kernel_versions(before, timed, have)
            perfdata.merge_write(out, header, entries)
    print(f"wrote {out} ({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


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
