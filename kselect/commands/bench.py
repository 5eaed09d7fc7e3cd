"""`kselect bench experiment=<name> [key=value ...]`: one recorded measurement (kselect/benchmarks/runner.py, whose
module docstring is the usage); the runner's exit status is the command's."""

from __future__ import annotations

import sys

from kselect.benchmarks.runner import main


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
