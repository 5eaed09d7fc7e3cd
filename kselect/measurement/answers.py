"""How fast kselect answers (issue #50), each figure beside same-run baselines.

    python -m kselect.measurement.answers --out bench/results/selector/answers [--reps 7]
    kselect bench experiment=answers                      # the same, as a recorded experiment

Records, each as wall-clock p50/p90 of separate processes (the way a user runs them):
  - baselines: `python -c pass`, `python -c "import hydra"`;
  - `kselect --help`;
  - one `kselect select` (SELECT below): first run (an empty user cache), cold (a question not composed before:
    its compose cache entry gone, the conf files' checks and parsed data kept, as after editing a conf file) and
    warm (the same question again);
  - bulk: `kselect select cells=<file>` over the Gemma-4 and models grids (kselect/oracle/cells.py), cells/s;
  - `kselect diff b.objective=latency` over the default matrix, and `kselect claims platform=sm90` (warm cache).
Also the load average before and after, CPU count, commit and versions (kselect/provenance.py). Writes
answers.json and README.md to --out. Children run with bytecode caching on (as an installed kselect runs),
whatever PYTHONDONTWRITEBYTECODE says here; every child gets its own XDG_CACHE_HOME under a temp folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SELECT = ["select", "platform=sm90", "model=llama3_1_8b"]
TARGETS = {"select_warm": 0.5, "select_auto_warm": 0.5, "select_cold": 1.0, "help": 0.3, "diff_latency": 30.0,
           "claims": 3.0}  # seconds
BULK_TARGET = 500  # cells/s


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "XDG_CACHE_HOME": str(cache)}


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(argv: list[str], cache: Path, stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """(wall, CPU) seconds of one run: CPU is user + sys of the process and the workers it waited for, the
    figure other sessions' load changes least."""
    cpu, t = _children_cpu(), time.perf_counter()
    p = subprocess.run(argv, env=_env(cache), stdout=stdout, stderr=subprocess.PIPE, text=True)
    took, cpu = time.perf_counter() - t, _children_cpu() - cpu
    if p.returncode:
        raise SystemExit(f"{shlex.join(argv)}: exit {p.returncode}: {p.stderr.strip()[:500]}")
    return took, cpu


def _wall(argv: list[str], cache: Path, stdout=subprocess.DEVNULL) -> float:
    return _timed(argv, cache, stdout)[0]


def _stats(runs: list[tuple[float, float]]) -> dict:
    """p50/p90 of wall seconds, p50 of CPU seconds, and every run's (wall, CPU)."""
    times = [w for w, _ in runs]
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else [times[0]] * 9
    return {"p50_s": round(statistics.median(times), 4), "p90_s": round(q[8], 4),
            "cpu_p50_s": round(statistics.median(c for _, c in runs), 4), "runs": len(runs),
            "all_s": [round(w, 4) for w in times], "all_cpu_s": [round(c, 4) for _, c in runs]}


def kselect(*args: str) -> list[str]:
    return [sys.executable, "-m", "kselect", *args]


def repeated(argv: list[str], reps: int, cache_for) -> dict:
    """p50/p90 of `reps` runs; cache_for(i): the XDG_CACHE_HOME of run i."""
    return {"command": shlex.join(argv), **_stats([_timed(argv, cache_for(i)) for i in range(reps)])}


def grid_file(path: Path) -> int:
    from kselect.oracle.cells import grid, models_grid  # noqa: PLC0415

    lines = [c.kselect_overrides() for c in grid()] + [c.kselect_overrides("vllm_0_34_0") for c in models_grid()]
    from kselect.selector.base.files import atomic_write  # noqa: PLC0415

    atomic_write(path, "".join(json.dumps(x) + "\n" for x in lines))
    return len(lines)


def measure(reps: int, tmp: Path, heavy: bool) -> dict:
    warm = tmp / "warm"
    fresh = lambda i: tmp / f"cold{i}"  # noqa: E731
    out: dict = {"baselines": {
        "python -c pass": repeated([sys.executable, "-c", "pass"], reps, lambda i: warm),
        "python -c 'import hydra'": repeated([sys.executable, "-c", "import hydra"], reps, lambda i: warm)}}
    out["help"] = repeated(kselect("--help"), reps, lambda i: warm)
    out["select_first_run"] = repeated(kselect(*SELECT), reps, fresh)
    _wall(kselect(*SELECT), warm)  # fill the cache

    def composed_gone(i: int) -> Path:
        shutil.rmtree(warm / "kselect" / "compose", ignore_errors=True)
        return warm

    out["select_cold"] = repeated(kselect(*SELECT), reps, composed_gone)
    out["select_warm"] = repeated(kselect(*SELECT), reps, lambda i: warm)
    # the bare question: the embedded default, platform=auto (torch decides only where a GPU device node is)
    _wall(kselect("select"), warm)
    out["select_auto_warm"] = repeated(kselect("select"), reps, lambda i: warm)
    cells = tmp / "grids.jsonl"
    n = grid_file(cells)
    for name, cache in (("bulk_cold", tmp / "bulk_cold"), ("bulk_warm", warm)):
        took, cpu = _timed(kselect("select", f"cells={cells}"), cache)
        out[name] = {"command": f"kselect select cells=<{n} cells: Gemma-4 grid + models grid>", "cells": n,
                     "wall_s": round(took, 3), "cpu_s": round(cpu, 3), "cells_per_s": round(n / took, 1),
                     "cells_per_cpu_s": round(n / cpu, 1)}
    if heavy:
        for name, args in (("diff_latency", ("diff", "b.objective=latency")), ("claims", ("claims", "platform=sm90"))):
            _wall(kselect(*args), warm)  # its composes cached: the figure is the warm one
            out[name] = {"command": shlex.join(["kselect", *args]), **_stats([_timed(kselect(*args), warm)])}
    return out


def verdicts(figures: dict) -> dict:
    out = {k: figures[k]["p50_s"] <= limit for k, limit in TARGETS.items() if k in figures}
    out["bulk_warm"] = figures["bulk_warm"]["cells_per_s"] >= BULK_TARGET
    return out


def load_note(meta: dict) -> str:
    """Whether the machine was quiet: other processes' load stretches wall time, far less CPU time."""
    peak = max(meta["load_before"][0], meta["load_after"][0])
    if peak <= 0.5 * meta["cpus"]:
        return f"- quiet: 1-minute load average at most {peak} on {meta['cpus']} CPUs"
    return (f"- **made under load**: 1-minute load average up to {peak} on {meta['cpus']} CPUs (other processes); "
            "wall figures are stretched by it, read them against the baselines of this run and the CPU column")


def report(doc: dict) -> str:
    f, meta = doc["figures"], doc["meta"]
    rows = [f"| {name} | `{v['command']}` | {v['p50_s']:.3f} s | {v['p90_s']:.3f} s | {v.get('cpu_p50_s', float('nan')):.3f} s |"
            for name, v in [*f["baselines"].items(), *((k, f[k]) for k in ("help", "select_first_run", "select_cold", "select_warm",
                                                                          "select_auto_warm", "diff_latency", "claims")
                                                 if k in f)]]
    bulk = [f"| {k} | `{f[k]['command']}` | {f[k]['wall_s']} s | {f[k].get('cpu_s', '')} s | {f[k]['cells_per_s']} cells/s |"
            for k in ("bulk_cold", "bulk_warm")]
    return "\n".join([
        "# How fast kselect answers (#50)", "",
        f"- command: `{meta['command']}`",
        f"- commit: `{meta['commit']}` (dirty: {meta['dirty']}); python {meta['python']}; "
        f"{meta['cpus']} CPUs; load average before {meta['load_before']}, after {meta['load_after']}",
        load_note(meta),
        f"- date: {meta['date']}; versions: {json.dumps(meta['versions'])}",
        "- wall clock of separate processes, and their CPU time (user + sys, with the workers they waited for); "
        "first run = an empty user cache; cold = the question's composed entry gone (conf checks and parsed data "
        "kept, as after editing a conf file); warm = the same question again", "",
        "| figure | command | p50 wall | p90 wall | p50 CPU |", "|---|---|---:|---:|---:|", *rows, "",
        "| bulk | command | wall | CPU | rate |", "|---|---|---:|---:|---:|", *bulk, "",
        f"targets (#50, p50 wall, quiet): {json.dumps(TARGETS)}, bulk >= {BULK_TARGET} cells/s; met: {json.dumps(doc['met'])}", ""])


class Options(BaseModel):
    """The run's options, typed: an experiment's `steps.<name>.options` (kselect bench) or the command line."""

    model_config = ConfigDict(extra="forbid")
    out: Path
    reps: int = Field(default=7, ge=1)  # runs per repeated figure
    heavy: bool = True  # also the diff and claims figures


def run(opts: Options, command: str) -> int:
    """Measure, then write answers.json and README.md to opts.out; `command` is what the record keeps."""
    from kselect.provenance import provenance  # noqa: PLC0415
    from kselect.selector.base.files import atomic_write  # noqa: PLC0415

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kselect-answers-") as tmp:
        figures = measure(opts.reps, Path(tmp), opts.heavy)
    doc = {"meta": {**provenance(), "command": command,
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpus": os.cpu_count(),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
           "figures": figures}
    doc["met"] = verdicts(figures)
    atomic_write(opts.out / "answers.json", json.dumps(doc, indent=2) + "\n")
    atomic_write(opts.out / "README.md", report(doc))
    print(report(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for answers.json and README.md")
    ap.add_argument("--reps", type=int, default=7, help="runs per repeated figure")
    ap.add_argument("--no-heavy", dest="heavy", action="store_false", help="leave out the diff and claims figures")
    opts = Options.model_validate(vars(ap.parse_args(argv)))
    return run(opts, shlex.join(["python", "-m", "kselect.measurement.answers", *argv]))


if __name__ == "__main__":
    sys.exit(main())
