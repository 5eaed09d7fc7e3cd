"""Launch parameters changed by shape for the calls inside a `with` block: how benchmarks compare variants of a
kernel's config table (kernels/gemv.py, kernels/skinny_gemm.py) inside a real model step. A CUDA graph captured
inside keeps what it launched with."""

from __future__ import annotations

import contextlib


class ShapeOverride:
    """One kernel's override: a function (n, k) -> the config entries to change (or None), set inside `configured`."""

    def __init__(self):
        self.fn = None

    @contextlib.contextmanager
    def configured(self, fn):
        """fn(n, k)'s entries replace the table's for calls inside; restored on exit and on errors."""
        was, self.fn = self.fn, fn
        try:
            yield
        finally:
            self.fn = was

    def apply(self, cfg: dict, n: int, k: int) -> dict:
        if self.fn is not None:
            cfg.update(self.fn(n, k) or {})
        return cfg
