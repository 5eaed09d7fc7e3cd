"""`kselect claims`: a Hydra app over conf/config.yaml; the claims are selector/measure/claims.py's, whose module
docstring is the usage."""

from __future__ import annotations

import json
import sys

from kselect.selector.base.errors import KSelectError
from kselect.selector.config.compose import CONF_DIR, compose
from kselect.selector.measure import claims
from kselect.selector.measure.claims import declared_claims, objective_claims, selection_claims
from kselect.selector.review.bulk import configs_of

from .plain import run_plain


def main(argv: list[str], output: str | None = None) -> int:
    """The claims, one id a line (output=json: a JSON list); `output`: the composed config's (None: compose argv)."""
    output = output or compose(argv).output
    if output not in ("table", "json"):
        raise KSelectError(f"claims: output={output}; allowed: table (one claim id a line), json (a list)")
    # the matrix Builder's batch: one Hydra compose per overlay set, not one per preset x cache x mode (~30 s on CPU)
    found = (selection_claims(argv, compose_all=configs_of) | declared_claims(argv)
             | objective_claims(argv, compose_all=configs_of))
    print(json.dumps(sorted(found)) if output == "json" else "\n".join(sorted(found)))
    return 0


def task(cfg) -> int:
    """The Hydra app: the overrides as given (e.g. platform=sm90) select the platform."""
    from kselect.selector.base.hydra_app import task_overrides  # noqa: PLC0415

    return main(task_overrides(), cfg.output)


def cli() -> None:
    argv = sys.argv[1:]
    code = run_plain("claims", argv, lambda cfg: main(argv, cfg.output))  # overrides only: checked by one compose, no Hydra app
    if code is not None:
        sys.exit(code)
    from kselect.selector.base.hydra_app import run_app  # noqa: PLC0415 - Hydra's app only for its flags, or to report an error

    run_app("claims", task, doc=claims.__doc__, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
