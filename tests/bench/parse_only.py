"""A program's own argument parser, given a command line, and nothing after the parse: how
tests/bench/test_recorded_commands.py checks a recorded command that needs a GPU on a machine without one. A module
(`kselect.commands.perf`, `kselect.measurement.prefill_clocks`) or a script of the checkout runs in this process until
its ArgumentParser has parsed argv; then it stops."""

from __future__ import annotations

import argparse
import importlib.util
import runpy
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path


class BenchError(Exception):
    """The program is missing, or its parser refused the command line."""


def is_script(run: str) -> bool:
    return run.endswith(".py") or "/" in run


class _Parsed(BaseException):  # not an Exception: a program's own `except Exception` must not catch it
    pass


@contextmanager
def _parse_only(argv0: str, argv: list[str]):
    """Every ArgumentParser stops right after a successful parse (parse_args, or parse_known_args called by the program
    itself); the program's argv is `argv`."""
    original, original_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    saved, inside = sys.argv, []

    def parse_args(self, args=None, namespace=None):
        inside.append(1)
        try:
            ns = original(self, args, namespace)
        finally:
            inside.pop()
        raise _Parsed(ns)

    def parse_known_args(self, args=None, namespace=None):
        got = original_known(self, args, namespace)
        if inside:  # parse_args's own call: it checks what is left
            return got
        raise _Parsed(got)

    argparse.ArgumentParser.parse_args = parse_args
    argparse.ArgumentParser.parse_known_args = parse_known_args
    sys.argv = [argv0, *argv]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = original, original_known
        sys.argv = saved


def _run_main(name: str) -> None:
    """`python -m name`, in this process, from the module's source (not through a loader: under pytest the assertion
    rewriter's loader cannot give runpy the code)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module named {name!r}")
    if spec.submodule_search_locations is not None:  # a package: its __main__
        spec = importlib.util.find_spec(f"{name}.__main__")
        if spec is None or spec.origin is None:
            raise ImportError(f"{name!r} is a package without __main__")
    code = compile(Path(spec.origin).read_text(), spec.origin, "exec")
    exec(code, {"__name__": "__main__", "__package__": spec.parent, "__file__": spec.origin, "__builtins__": __builtins__})


def check_argv(root: Path, prog: str, argv: list[str], where: str) -> None:
    """`prog` (a module or a script under `root`) parses `argv` with its own argument parser; nothing after the parse
    runs. Raises BenchError where the program is missing, its parser refuses argv, or it parses no arguments."""
    if is_script(prog) and not (root / prog).is_file():
        raise BenchError(f"{where}: bad value {prog!r}; allowed: a script under the checkout or a module name.")
    try:
        with _parse_only(prog, argv):
            if is_script(prog):
                runpy.run_path(str(root / prog), run_name="__main__")
            else:
                _run_main(prog)
    except _Parsed:
        return
    except SystemExit as e:
        if e.code not in (0, None):
            raise BenchError(f"{where}: its parser refused `{shlex.join(argv)}` (above).") from None
    except ImportError as e:
        raise BenchError(f"{where}: bad value {prog!r}: {e}") from None
    raise BenchError(f"{where}: {prog!r} finished without parsing arguments; allowed: argparse programs.")
