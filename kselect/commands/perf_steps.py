"""`kselect perf-steps`: is the model's eager prefill step host- or GPU-bound (kselect/measurement/perf_steps.py, whose
module docstring is the usage); errors are one paragraph with exit 2."""

from __future__ import annotations

import argparse
import shlex

from kselect.measurement import perf_steps
from kselect.measurement.perf_steps import PerfStepsRun
from kselect.selector.base.cli_errors import run_cli


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kselect perf-steps", description=perf_steps.__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-name", required=True, help="GPU model key, e.g. nvidia_h200")
    ap.add_argument("--out", default=None, help="perf file (default conf/perf/<gpu-name>.yaml); merged, atomic")
    ap.add_argument("--models", default="gemma4_31b", help="comma-separated conf/model names")
    ap.add_argument("--prefill", default="512,4096", help="comma-separated prompt lengths (B1)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--platform", default="auto")
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return perf_steps.run(PerfStepsRun(**vars(args)), shlex.join(["kselect", "perf-steps", *argv]))


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
