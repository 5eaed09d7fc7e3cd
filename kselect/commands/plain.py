"""A command line of Hydra overrides only, answered in this process with one compose, without Hydra's app.

Why: `hydra.main` composes the config once to learn the run mode and again for the job, and the command then composes
its own (selector/config/compose.py); a plain question paid for three. Flags (`--cfg`, `-m`, `--help`), `hydra.*`
overrides, and any line compose refuses go to the Hydra app, which reports them as it always has.
"""

from __future__ import annotations

from collections.abc import Callable

from kselect.selector.base.cli_errors import check_printable, check_renamed, report_error
from kselect.selector.base.errors import KSelectError
from kselect.selector.config.compose import compose


def overrides_only(argv: list[str]) -> bool:
    """No flag and no `hydra.*` override: nothing but what kselect's config composes."""
    return all(not a.startswith("-") and not a.lstrip("+~").startswith("hydra") for a in argv)


def run_plain(command: str, argv: list[str], answer: Callable, renamed: dict[str, str] | None = None) -> int | None:
    """answer(cfg) for the config `argv` composes: exit 0, or 2 with its KSelectError's paragraph; None (the Hydra
    app's turn) where argv is not overrides only or compose refuses it."""
    try:
        check_printable(argv)
        if not overrides_only(argv):
            return None
        check_renamed(command, argv, renamed or {})
    except KSelectError as e:
        report_error(e)
        return 2
    try:
        cfg = compose(argv)
    except KSelectError:
        return None
    try:
        answer(cfg)
    except KSelectError as e:
        report_error(e)
        return 2
    return 0
