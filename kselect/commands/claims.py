"""`kselect claims`: a Hydra app over conf/config.yaml; the claims are selector/measure/claims.py's, whose module
docstring is the usage."""

from __future__ import annotations

from kselect.selector.base.hydra_app import run_app, task_overrides
from kselect.selector.config.compose import CONF_DIR
from kselect.selector.measure import claims
from kselect.selector.measure.claims import declared_claims, objective_claims, selection_claims
from kselect.selector.review.bulk import configs_of


def main(argv: list[str]) -> int:
    # the matrix Builder's batch: one Hydra compose per overlay set, not one per preset x cache x mode (~30 s on CPU)
    found = (selection_claims(argv, compose_all=configs_of) | declared_claims(argv)
             | objective_claims(argv, compose_all=configs_of))
    print("\n".join(sorted(found)))
    return 0


def task(cfg) -> int:
    """The Hydra app: the overrides as given (e.g. platform=sm90) select the platform."""
    return main(task_overrides())


def cli() -> None:
    run_app("claims", task, doc=claims.__doc__, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
