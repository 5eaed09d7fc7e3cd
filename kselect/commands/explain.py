"""`kselect explain`: a Hydra app over conf/config.yaml (--help, --cfg job, -m, hydra.* work); the figures are
selector/measure/explain.py's, whose module docstring is the usage."""

from __future__ import annotations

import json
import sys

from kselect.selector.base.errors import KSelectError
from kselect.selector.config.compose import CONF_DIR, compose
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.measure import explain
from kselect.selector.measure.explain import to_text

from .plain import run_plain


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(explain.__doc__.strip())
        return 0
    _answer(compose(argv))
    return 0


def _answer(cfg) -> None:
    if cfg.output == "vllm":  # select's vLLM flags: nothing of explain's table is a flag
        raise KSelectError("explain: output=vllm is kselect select's vLLM flags; allowed here: table, markdown, json")
    d = explain.explain(cfg, Evidence.load(CONF_DIR))  # the evidence of the conf tree the config came from
    if cfg.output == "json":
        print(json.dumps(d, indent=2))
    else:
        print(to_text(d, markdown=cfg.output == "markdown"))


def task(cfg) -> int:
    """The Hydra app: the overrides as given select platform, model and objective."""
    from kselect.selector.base.hydra_app import task_overrides  # noqa: PLC0415

    return main(task_overrides())


def cli() -> None:
    code = run_plain("explain", sys.argv[1:], _answer)  # overrides only: one compose, no Hydra app
    if code is not None:
        sys.exit(code)
    from kselect.selector.base.hydra_app import run_app  # noqa: PLC0415 - Hydra's app only for its flags, or to report an error

    run_app("explain", task, doc=explain.__doc__, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
