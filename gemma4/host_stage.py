"""Host values into a captured step's static device buffer, through a pinned host buffer of its own.

Why: a copy from pageable host memory goes through the driver's staging, and on the H200 machines E4B's graphed
4,096-token prefill stalled 9-12 ms inside those copies in about one step of five, while the same fill took 1-2 ms
otherwise (bench/results/h200/clocks/README.md). From pinned memory the copy is a plain asynchronous DMA.

The pinned buffer may be rewritten only after the copy that reads it has run: `put` waits for the event recorded
after the last copy (already complete in a step-by-step engine, so the wait costs nothing there).
"""

from __future__ import annotations

import torch


class HostStage:
    def __init__(self, dst: torch.Tensor):
        self.dst = dst
        self.cuda = dst.device.type == "cuda"
        self.buf = torch.empty(dst.shape, dtype=dst.dtype, pin_memory=self.cuda)
        self.copied = torch.cuda.Event() if self.cuda else None
        self.pending = False

    def put(self, values) -> None:
        """dst[:n] = values (a host tensor or a list; n = its first dimension): asynchronous on CUDA, in stream order."""
        src = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=self.dst.dtype)
        if src.device.type != "cpu":
            raise ValueError(f"HostStage.put takes host values, got a tensor on {src.device}")
        n = src.shape[0] if src.dim() else 1
        if n > self.dst.shape[0] or src.shape[1:] != self.dst.shape[1:]:
            raise ValueError(f"values of shape {tuple(src.shape)} do not fit a buffer of {tuple(self.dst.shape)}")
        if not self.cuda:
            self.dst[:n].copy_(src)
            return
        if self.pending:
            self.copied.synchronize()  # the last copy out of buf has run
        self.buf[:n].copy_(src)
        self.dst[:n].copy_(self.buf[:n], non_blocking=True)
        self.copied.record()
        self.pending = True
