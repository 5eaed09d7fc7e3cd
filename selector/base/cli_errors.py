"""Shared CLI plumbing: every error prints one paragraph on stderr and exits with status 2.

`--debug` anywhere on the command line (or KSELECT_DEBUG=1) re-raises instead, with the
traceback. An exception that is not a KSelectError is a bug in kselect: exit 3 with one
paragraph (`internal_error`) asking for a report with the command line, no traceback.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence

from ..base.errors import KSelectError

DEBUG_FLAG = "--debug"
INTERNAL_ERROR = 3  # a bug in kselect (bad input is 2)


def debug_enabled() -> bool:
    return os.environ.get("KSELECT_DEBUG", "") not in ("", "0")


def check_renamed(command: str, overrides: list[str], renamed: dict[str, str]) -> None:
    """Old spellings of keys (`overlays=`) exit 2 naming the new one."""
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0]
        if key in renamed:
            raise KSelectError(f"{command}: {o!r} is the old spelling; {renamed[key]}")


def strip_debug(argv: Sequence[str]) -> list[str]:
    """argv without `--debug`."""
    return [a for a in argv if a != DEBUG_FLAG]


PROMPT_FLAGS = ("--prompt",)  # free text: newlines and tabs are part of a prompt


def check_printable(argv: Sequence[str]) -> None:
    """Every argument whole and printable: a trailing newline or an escape is refused naming its key or flag (a name
    read up to `$` or `.strip()` would otherwise pass), before any work. A prompt's value may hold any text."""
    for i, a in enumerate(argv):
        if a.isprintable() or (i and argv[i - 1] in PROMPT_FLAGS) or a.startswith(tuple(f + "=" for f in PROMPT_FLAGS)):
            continue
        if "=" in a:
            what = f"{a.split('=', 1)[0]}= (in {a!r})"
        elif i and argv[i - 1].startswith("-"):
            what = f"{argv[i - 1]} {a!r}"
        else:
            what = f"argument {i + 1} {a!r}"
        bad = next(ch for ch in a if not ch.isprintable())
        raise KSelectError(f"{what}: holds the control character {bad!r}; allowed: printable text (a newline or an "
                           "escape in a name, value or path is never read up to it)")


def call_main(main: Callable[[list[str]], int | None], argv: Sequence[str]) -> int:
    """Run a command's main on argv and return its exit status (errors reported, never raised,
    unless debugging). Tests call this in-process."""
    debug = DEBUG_FLAG in argv or debug_enabled()
    argv = strip_debug(argv)
    saved = os.environ.get("KSELECT_DEBUG")
    if debug:  # the Hydra apps' own backstop (hydra_app.run_app) reads it
        os.environ["KSELECT_DEBUG"] = "1"
    try:
        check_printable(argv)
        code = main(argv)
    except SystemExit as e:  # argparse and friends
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else _report_text(str(e.code)))
    except KSelectError as e:
        if debug:
            raise
        report_error(e)
        code = 2
    except BrokenPipeError:
        code = 0
    except KeyboardInterrupt:
        print("kselect: interrupted", file=sys.stderr)
        code = 130
    except (MemoryError, RecursionError) as e:
        if debug:
            raise
        report_error(f"input too large to process ({e.__class__.__name__}); make the config or file smaller")
        code = 2
    except Exception as e:  # noqa: BLE001 - a bug: one paragraph for the user, the traceback on --debug
        if debug:
            raise
        report_error(internal_error(e, [*_prog(), *argv]))
        code = INTERNAL_ERROR
    finally:
        if saved is None:
            os.environ.pop("KSELECT_DEBUG", None)
        else:
            os.environ["KSELECT_DEBUG"] = saved
    return 0 if code is None else code


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("kselect")
    except PackageNotFoundError:
        return "(not installed)"


def _prog() -> list[str]:
    """The command as the user typed it: `kselect <command>` (kselect/cli.py sets argv[0] so), else the script."""
    return sys.argv[0].split(" ", 1) if sys.argv and sys.argv[0].startswith("kselect ") else sys.argv[:1]


def internal_error(e: BaseException, argv: Sequence[str]) -> str:
    """The paragraph for a bug: what was raised and the command line to report, shell-quoted."""
    what = " ".join(f"{e.__class__.__name__}: {e}".split())[:300]
    return (f"internal error in kselect {_version()}: {what}; please report it with this command: {shlex.join(argv)} "
            f"(rerun with --debug or KSELECT_DEBUG=1 for the traceback)")


def run_cli(main: Callable[[list[str]], int | None]) -> None:
    sys.exit(call_main(main, sys.argv[1:]))


def run_script(main: Callable[[], int | None]) -> None:
    """run_cli for a script whose main() parses sys.argv itself (argparse)."""

    def wrapped(argv: list[str]) -> int | None:
        sys.argv[1:] = argv  # without --debug
        return main()

    sys.exit(call_main(wrapped, sys.argv[1:]))


def _report_text(text: str) -> int:
    report_error(text)
    return 2


def report_error(e: Exception | str) -> None:
    """One paragraph: blank lines squeezed out; the message names the key or file."""
    text = "\n".join(line for line in str(e).splitlines() if line.strip())
    print(f"kselect: {text}", file=sys.stderr)
