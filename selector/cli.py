"""Shared CLI plumbing: errors print one paragraph on stderr and exit with status 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .errors import KSelectError


def run_cli(main: Callable[[list[str]], int]) -> None:
    try:
        code = main(sys.argv[1:])
    except KSelectError as e:
        report_error(e)
        code = 2
    except BrokenPipeError:
        code = 0
    sys.exit(code)


def report_error(e: Exception) -> None:
    print(f"kselect: {e}", file=sys.stderr)
