"""Module switches set for a block: a measurement's variant, or a test, sets a kernel module's switch inside a `with`
and gets the old value back after it (a CUDA graph captured inside keeps the choice)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def switched(namespace: dict, **values):
    """namespace's entries (a module's globals(), or a dict of settings) set to `values` inside, restored after."""
    was = {k: namespace[k] for k in values}
    namespace.update(values)
    try:
        yield
    finally:
        namespace.update(was)
