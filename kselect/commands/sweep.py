"""`kselect sweep`: a Hydra multirun of selections over conf/config.yaml, one job a cell (selector/review/sweep.py,
whose module docstring is the usage, plans the command line and runs each job)."""

from __future__ import annotations

import os
import sys
import uuid

from kselect.selector.base.cli_errors import report_error, strip_debug
from kselect.selector.base.errors import KSelectError
from kselect.selector.base.hydra_app import run_app
from kselect.selector.review import sweep
from kselect.selector.review.sweep import RENAMED, SWEEP_ENV, job, plan


def main(argv: list[str] | None = None) -> int:
    argv = strip_debug(sys.argv[1:] if argv is None else argv)
    try:
        args, jobs = plan(argv)
    except KSelectError as e:
        report_error(e)
        sys.exit(2)
    os.environ[SWEEP_ENV] = f"{uuid.uuid4().hex}:{jobs}"
    sys.argv[1:] = args
    run_app("sweep", job, doc=sweep.__doc__, config_dir=sweep.CONF_DIR, config_name="config", renamed=RENAMED)
    return 0


cli = main

if __name__ == "__main__":
    main()
