"""`kselect matrix`: the resolved matrix, one block per cell (a Hydra app over the structured config `kselect_matrix`;
the run is selector/review/matrix.py's matrix_task, whose docstring is the usage)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from kselect.selector.base.hydra_app import compose_args, run_app
from kselect.selector.review.matrix import RENAMED, MatrixArgs, matrix_task

ConfigStore.instance().store(name="kselect_matrix", node=MatrixArgs)


def main(argv: list[str]) -> int:
    """In-process `kselect matrix` (tests)."""
    return matrix_task(compose_args("matrix", "kselect_matrix", argv, RENAMED))


def cli() -> None:
    run_app("matrix", matrix_task, doc=matrix_task.__doc__, config_name="kselect_matrix", renamed=RENAMED)


if __name__ == "__main__":
    cli()
