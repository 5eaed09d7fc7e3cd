"""Selector benchmark: import time, per-resolution time, full default-matrix expansion and
resolution, and the review diff over it.

    python -m kselect.measurement.selector.timing [--repeat 5] [--out bench/results/selector]

Writes bench_selector.json and bench_selector.md (the command, the commit, the machine) to the
output directory. Everything runs on the CPU; numbers from a shared or loaded machine are
noisy, so each timing is the median of --repeat runs (CPU time is reported beside wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from kselect.provenance import CHECKOUT as ROOT
from kselect.selector.base.files import atomic_write

IMPORT_SNIPPET = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"


def fresh_import(mod: str, repeat: int) -> dict:
    """Import time of `mod` in a fresh interpreter (median over `repeat` subprocesses)."""
    times = []
    for _ in range(repeat):
        p = subprocess.run([sys.executable, "-c", IMPORT_SNIPPET.format(mod=mod)], cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(float(p.stdout.strip()))
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}


def cli_run(args: list[str], repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kselect.selector", *args], cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times), "command": shlex.join(["kselect", "select", *args])}


def timed(fn, repeat: int) -> tuple[dict, object]:
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return {"median_s": statistics.median(walls), "min_s": min(walls), "cpu_median_s": statistics.median(cpus), "runs": repeat}, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--resolutions", type=int, default=2000, help="resolutions for the per-resolution time")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "selector"))
    a = ap.parse_args()

    from kselect.selector.api import compose, compose_raw, validate
    from kselect.selector.review.diff import diff_results
    from kselect.selector.review.matrix import Builder, expand, load_matrix, resolve_cells
    from kselect.selector.api import resolve
    from kselect.selector.rules.rulebook import RuleBook

    r: dict = {}
    r["import_selector_api"] = fresh_import("kselect.selector.api", a.repeat)
    r["import_selector_matrix"] = fresh_import("kselect.selector.review.matrix", a.repeat)
    r["cli_one_selection"] = cli_run(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "rules=post_pr52987", "overlay=[pr48666]"], a.repeat)

    overrides = ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "spec_decode=mtp", "rules=post_pr52987", "overlay=[pr48666]"]
    r["compose_and_validate"], cfg = timed(lambda: validate(compose_raw(overrides)), a.repeat)
    cfg = compose(overrides)
    n = a.resolutions
    r["resolve_cold_ms"] = timed(lambda: [resolve(cfg, book=RuleBook(cfg)) for _ in range(50)], a.repeat)[0]
    r["resolve_cold_ms"] = {k: (v / 50 * 1e3 if k.endswith("_s") else v) for k, v in r["resolve_cold_ms"].items()}
    resolve(cfg)
    hot = timed(lambda: [resolve(cfg) for _ in range(n)], a.repeat)[0]
    r["resolve_hot_ms"] = {k: (v / n * 1e3 if k.endswith("_s") else v) for k, v in hot.items()}
    r["resolve_hot_ms"]["note"] = "same config again (compiled rules and stage memo warm), per resolution"
    r["resolve_cold_ms"]["note"] = "a fresh RuleBook each time (rules compiled, memo empty), per resolution"

    spec = load_matrix("default")
    r["matrix_expand"], cells = timed(lambda: expand(spec), a.repeat)
    r["matrix_cells"] = len(cells)
    results = {}
    for ov in ((), ("pr48666",)):
        key = "matrix_resolve_" + ("+".join(ov) or "base")
        r[key], results[ov] = timed(lambda ov=ov: resolve_cells(expand(spec, ov), builder=Builder()), a.repeat)
        r[key]["note"] = "expand + one Hydra compose + validate + model_copy per cell + resolve, fresh Builder"
        r[key]["cells_per_s"] = len(cells) / r[key]["median_s"]
    r["matrix_diff_base_vs_pr48666"] = timed(lambda: diff_results(spec, results[()], results[("pr48666",)]), a.repeat)[0]

    from kselect.provenance import project_commit, versions  # the project's commit, not an enclosing repo's

    own = project_commit(ROOT)
    meta = {
        "command": shlex.join([Path(sys.executable).name, "-m", __spec__.name if __spec__ else sys.argv[0],
                                *sys.argv[1:]]),
        "commit": own["commit"] + (" (+ uncommitted changes)" if own["dirty"] else ""),
        "commit_source": own["commit_source"],
        "versions": versions(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs".replace("  ", " "),
        "load_avg": os.getloadavg(),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write((out / "bench_selector.json"), json.dumps({"meta": meta, "results": r}, indent=2) + "\n")
    atomic_write((out / "bench_selector.md"), markdown(meta, r))
    print(markdown(meta, r))
    return 0


def markdown(meta: dict, r: dict) -> str:
    ms = lambda d: f"{d['median_s'] * 1e3:.0f} ms"  # noqa: E731
    rows = [
        ("import selector.api (fresh interpreter: hydra, pydantic, schema)", ms(r["import_selector_api"])),
        ("import selector.matrix (fresh interpreter)", ms(r["import_selector_matrix"])),
        (f"`{r['cli_one_selection']['command']}` (whole process)", ms(r["cli_one_selection"])),
        ("Hydra compose + validate, one config", ms(r["compose_and_validate"])),
        ("resolve, cold (fresh compiled rulebook)", f"{r['resolve_cold_ms']['median_s']:.2f} ms"),
        ("resolve, hot (same config again)", f"{r['resolve_hot_ms']['median_s']:.3f} ms"),
        (f"expand the default matrix ({r['matrix_cells']} cells)", ms(r["matrix_expand"])),
    ]
    for k in [k for k in r if k.startswith("matrix_resolve_")]:
        rows.append((f"default matrix, {k.removeprefix('matrix_resolve_')}: compose + configs + resolve every cell",
                     f"{r[k]['median_s']:.2f} s wall, {r[k]['cpu_median_s']:.2f} s CPU ({r[k]['cells_per_s']:.0f} cells/s)"))  # fmt: skip
    rows.append(("diff base vs pr48666 over the resolved default matrix", ms(r["matrix_diff_base_vs_pr48666"])))
    lines = [
        "# kselect selector benchmark",
        "",
        f"- command: `{meta['command']}`",
        f"- commit: `{meta['commit']}`",
        f"- date: {meta['date']}; python {meta['python']}; {meta['machine']}; load average {', '.join(f'{x:.2f}' for x in meta['load_avg'])}",
        "- medians of repeated runs; CPU only",
        "",
        "| what | time |",
        "|---|---:|",
    ]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from kselect.selector.base.cli_errors import run_script

    run_script(main)  # every error: exit 2, one paragraph (--debug: traceback)
