"""`kselect run`: a Hydra app over conf/config.yaml (kselect/run.py, whose module docstring is the usage). Its own
--options are taken off the command line first; everything else (overrides, --cfg, --help, -m, hydra.*) goes to
Hydra. Every error: exit 2 and one paragraph."""

from __future__ import annotations

import sys

from kselect import run
from kselect.run import _parser, main, user_errors
from kselect.selector.api import CONF_DIR
from kselect.selector.base.hydra_app import run_app, task_overrides


def cli() -> None:
    opts, rest = _parser(add_help=False).parse_known_args(sys.argv[1:])
    sys.argv[1:] = rest
    checked = user_errors(main)

    def task(cfg) -> int:
        return checked(task_overrides(), opts)

    opts_help = _parser(add_help=False).format_help()
    doc = run.__doc__.rstrip() + "\n\nkselect run's own " + opts_help[opts_help.index("options:"):].rstrip()
    run_app("run", task, doc=doc, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
