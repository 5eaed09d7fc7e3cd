"""Capturing one step as a CUDA graph: the protocol every captured step of the engine shares.

A subclass owns static input buffers and `_run()`, the step's body, which reads only those buffers
and returns its outputs (a tensor or a tuple). `capture` warms up on a side stream (allocations,
kernel autotuning and host-side planning happen there, not under capture), captures, and keeps
the outputs; `replay` re-runs the captured kernels over whatever the buffers hold now.
"""

from __future__ import annotations

import torch


class CapturedStep:
    graph = None
    out = None

    def _run(self):  # pragma: no cover - subclasses
        raise NotImplementedError

    def _rewind(self):
        """Undo what `_run` does to its own inputs (a step that advances them for the next replay), so that every
        warm-up runs the same step."""

    def capture(self):
        """Warm up twice, capture, return the last eager (warm-up) outputs, cloned."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up: a step that writes the cache rewrites the same slots with the same values
                eager = self._run()
                self._rewind()
        torch.cuda.current_stream().wait_stream(s)
        eager = tuple(x.clone() for x in eager) if isinstance(eager, tuple) else eager.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._run()
        return eager

    def replay(self):
        self.graph.replay()
        return self.out
