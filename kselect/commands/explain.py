"""`kselect explain`: a Hydra app over conf/config.yaml (--help, --cfg job, -m, hydra.* work); the figures are
selector/measure/explain.py's, whose module docstring is the usage."""

from __future__ import annotations

import json

from kselect.selector.base.hydra_app import run_app, task_overrides
from kselect.selector.config.compose import CONF_DIR, compose
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.measure import explain
from kselect.selector.measure.explain import to_text


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(explain.__doc__.strip())
        return 0
    cfg = compose(argv)
    d = explain.explain(cfg, Evidence.load(CONF_DIR))  # the evidence of the conf tree the config came from
    if cfg.output == "json":
        print(json.dumps(d, indent=2))
    else:
        print(to_text(d, markdown=cfg.output == "markdown"))
    return 0


def task(cfg) -> int:
    """The Hydra app: the overrides as given select platform, model and objective."""
    return main(task_overrides())


def cli() -> None:
    run_app("explain", task, doc=explain.__doc__, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
