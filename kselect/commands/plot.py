"""`kselect plot`: a picture of the matrix or of a diff (a Hydra app over the structured config `kselect_plot`; the
run is selector/review/plot.py's task, whose module docstring is the usage)."""

from __future__ import annotations

from kselect.selector.base.hydra_app import compose_args, run_app
from kselect.selector.review import plot
from kselect.selector.review.plot import RENAMED, task


def main(argv: list[str]) -> int:
    """In-process `kselect plot` (tests)."""
    return task(compose_args("plot", "kselect_plot", argv, RENAMED))


def cli() -> None:
    run_app("plot", task, doc=plot.__doc__, config_name="kselect_plot", renamed=RENAMED)


if __name__ == "__main__":
    cli()
