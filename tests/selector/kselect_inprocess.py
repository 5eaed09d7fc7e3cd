"""`kselect <command> ...` in this process, through the real entry point (kselect/cli.py -> the command's
file in kselect/commands/ -> its Hydra app), and missing optional modules simulated in-process.

The fuzz table (test_fuzz.py) drives each command's in-process `main`, which skips the Hydra app that
`kselect <command>` runs: group values, `hydra.*` keys and plugins are handled there, so the bad-input tests
of those go through here.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import signal
import sys
from collections.abc import Iterator


def kselect_main(command: str):
    """A `main(argv)` for selector.cli.call_main that runs `kselect <command> argv` as the console script does."""

    def main(argv: list[str]) -> int:
        from hydra.core.global_hydra import GlobalHydra

        from kselect.cli import main as cli_main

        argv0, handler = sys.argv[:], signal.getsignal(signal.SIGPIPE) if hasattr(signal, "SIGPIPE") else None
        # pytest's assertion rewriter claims kselect's modules (its plugin is one) but cannot hand runpy their code
        hooks = [f for f in sys.meta_path if type(f).__name__ == "AssertionRewritingHook"]
        for f in hooks:
            sys.meta_path.remove(f)
        try:
            cli_main([command, *argv])
            return 0
        finally:
            sys.meta_path[:0] = hooks
            sys.argv[:] = argv0
            if handler is not None:  # kselect/cli.py restores SIGPIPE's default for `| head`: not in a test process
                signal.signal(signal.SIGPIPE, handler)
            GlobalHydra.instance().clear()
            for var in ("KSELECT_SWEEP", "HYDRA_FULL_ERROR"):
                os.environ.pop(var, None)

    return main


class _Blocker(importlib.abc.MetaPathFinder):
    """Import of these modules (and their submodules) fails as it does when the package is not installed."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextlib.contextmanager
def missing(*names: str) -> Iterator[None]:
    """Run the block as if `names` (top-level or dotted modules) were not installed."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if any(k == n or k.startswith(n + ".") for n in names)}
    blocker = _Blocker(names)
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        for k in [k for k in sys.modules if any(k == n or k.startswith(n + ".") for n in names)]:
            del sys.modules[k]
        sys.modules.update(saved)
