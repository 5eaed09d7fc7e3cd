"""`kselect <command> [args]`: one entry point over the project's command lines.

Each command is one file of kselect/commands/ (COMMANDS); `python -m kselect.commands.<file>` runs the same.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys

# command -> (its file in kselect/commands/, help). The file's cli() runs the command on sys.argv; each file is
# imported only when its command runs (the selector never loads torch for `kselect select`).
COMMANDS = {
    "select": ("select", "the selection per layer group (table, json, markdown, vllm)"),
    "diff": ("diff", "what an overlay or a conf/ change does over a matrix"),
    "matrix": ("matrix", "the resolved matrix, a block per cell"),
    "plot": ("plot", "a diff as a PNG + HTML grid"),
    "sweep": ("sweep", "a Hydra multirun of selections"),
    "gather": ("gather", "one table of a sweep's outputs"),
    "explain": ("explain", "is FP8 KV faster than bf16 here? measured time, capacity, numerics per group"),
    "claims": ("claims", "the capability claims a selection relies on"),
    "conformance": ("conformance", "run claims on this machine's kernels"),
    "perf": ("perf", "time verified kernels over shape buckets -> conf/perf/<gpu>.yaml"),
    "perf-steps": ("perf_steps", "is the model's eager prefill step host- or GPU-bound? -> conf/perf/<gpu>.yaml"),
    "run": ("run", "select, then run the bundled Gemma-4 on the selection"),
    "bench": ("bench", "a recorded measurement: bench/conf/experiment/<name>.yaml"),
    "oracle": ("oracle", "run a vLLM release's own selection over the grid, compare with a rules preset"),
}


def command(name: str):
    """The function behind a command name."""
    return importlib.import_module(f"kselect.commands.{COMMANDS[name][0]}").cli


def usage() -> str:
    rows = "\n".join(f"  {name:<12} {help_}" for name, (_, help_) in COMMANDS.items())
    return (f"usage: kselect <command> [args]\n       kselect --version | -sc install=bash\n\ncommands:\n{rows}\n\n"
            "`kselect <command> --help` for each (--help-all: every key).")


def version() -> str:
    """`kselect --version`: the package version and the commit it was built from (provenance.py)."""
    from kselect import __version__  # noqa: PLC0415
    from kselect.provenance import project_commit  # noqa: PLC0415

    c = project_commit()
    dirty = " with uncommitted changes" if c.get("dirty") else ""
    return f"kselect {__version__} (commit {c['commit']}{dirty})"


def main(argv: list[str] | None = None) -> None:
    process_ends = argv is None  # the console script: this process ends when the command does
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-V"]):
        print(version())
        sys.exit(0)
    if argv[:1] in (["-sc"], ["--shell-completion"]):  # `kselect -sc install=bash`: one script for every command
        from kselect.selector.base.completion import shell_completion  # noqa: PLC0415

        sys.exit(shell_completion(argv[1:], list(COMMANDS)))
    if argv and argv[0] == "--debug":  # `kselect --debug <command> ...`: the command's own flag
        argv = [*argv[1:2], "--debug", *argv[2:]]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"kselect: unknown command {name!r}; allowed: {', '.join(COMMANDS)}.", file=sys.stderr)
        sys.exit(2)
    if hasattr(signal, "SIGPIPE"):  # `kselect ... | head`: end quietly when the reader goes, as `cat` does (Hydra
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # logs --info: its handlers would print each failed write)
    sys.argv = [f"kselect {name}", *rest]
    from kselect.selector.base.cli_errors import check_printable, report_error
    from kselect.selector.base.errors import KSelectError

    try:
        check_printable(rest)
    except KSelectError as e:
        report_error(e)
        sys.exit(2)
    try:
        command(name)()
    except BrokenPipeError:  # the reader went away (`kselect run --help | head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(141)
    except KeyboardInterrupt:
        print("kselect: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the backstop of every command: a bug is exit 3 and one paragraph
        from kselect.selector.base.cli_errors import debug_enabled, internal_error

        if "--debug" in rest or debug_enabled():
            raise
        report_error(internal_error(e, ["kselect", *argv]))
        sys.exit(3)
    finally:
        # No collector pass at exit over what the command built: over a matrix's memos and results (one process,
        # `kselect diff b.objective=latency`) it took 13 s of CPU. Not once triton is loaded (`kselect run`, through
        # torch): its nanobind extension reports the objects a freeze keeps alive as leaks, on stderr, at exit.
        if process_ends and "triton" not in sys.modules:
            gc.freeze()


if __name__ == "__main__":
    main()
