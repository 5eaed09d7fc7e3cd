"""`kselect bench experiment=<name> [key=value ...]`: one recorded measurement (kselect/measurement/runner.py, whose
module docstring is the usage); the runner's exit status is the command's."""

from __future__ import annotations

import sys

from kselect.measurement.runner import main


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
