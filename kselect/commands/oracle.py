"""`kselect oracle`: run a vLLM release's own selection over the grid and compare it with a rules preset
(kselect/oracle/cli.py, whose argparse parser is the usage). KSELECT_ORACLE_TIME=1 prints the command's wall time."""

from __future__ import annotations

import os
import sys
import time

from kselect.oracle.cli import main


def cli() -> None:
    t0 = time.perf_counter()
    rc = main()
    if os.environ.get("KSELECT_ORACLE_TIME"):
        print(f"oracle: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    cli()
