"""`kselect perf`: time verified kernels over shape buckets (kselect/measurement/perf.py, whose argparse parser is the usage);
errors are one paragraph with exit 2."""

from __future__ import annotations

from kselect.measurement.perf import main
from kselect.selector.base.cli_errors import run_cli


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
