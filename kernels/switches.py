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


def launch_switched(namespace: dict, what: str, **values):
    """`switched` for a kernel's launch parameters, each a power of two (block shapes, warps); ValueError naming
    `what` otherwise."""
    bad = {k: v for k, v in values.items() if not (isinstance(v, int) and v >= 1 and not v & (v - 1))}
    if bad:
        raise ValueError(f"{what} launch parameters must be powers of two, got {bad}")
    return switched(namespace, **values)
