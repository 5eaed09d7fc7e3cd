"""`kselect conformance`: run capability claims on this machine's kernels (kselect/measurement/conformance.py, whose
module docstring is the usage); errors are one paragraph with exit 2."""

from __future__ import annotations

import argparse
import shlex

from kselect.measurement import conformance
from kselect.measurement.conformance import ConformanceRun
from kselect.selector.base.cli_errors import run_cli


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kselect conformance", description=conformance.__doc__.split("\n\n")[0])
    ap.add_argument("--claims", required=True, help="YAML/text file of claim ids, or a comma-separated list")
    ap.add_argument("--gpu-name", default=None, help="the GPU model (default: this device's, e.g. nvidia_h200)")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"])  # default: cuda where available
    ap.add_argument("--out", required=True, help="the conformance file; an existing one is merged into (re-run claims replaced)")
    ap.add_argument("--jobs", type=int, default=1, help="processes, one kernel family each at a time (1..64)")
    ap.add_argument("--platform", default=None, help="the selector's platform for descale/page (default: auto, cpu on --device cpu)")
    ap.add_argument("--missing", action="store_true",
                    help="run only the claims the --out file does not hold yet (the rest are kept as they are)")
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return conformance.run(ConformanceRun(**vars(args)), shlex.join(["kselect", "conformance", *argv]))


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
