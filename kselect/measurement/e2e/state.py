"""What the harness's steps share: the run (options, report, clock) and a built preset (model, prompts, rows)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from kselect.measurement.e2e.options import Options
from kselect.measurement.e2e_report import Report


@dataclass
class Run:
    """One run: its options, report, clock and CUDA-graph setting (None: the engine's default)."""

    opts: Options
    rep: Report
    t0: float
    graphs: bool | None

    def left(self) -> float:
        return self.opts.budget_s - (time.perf_counter() - self.t0)

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def skip(self, what: str) -> None:
        self.rep.data["skipped"].append(what)
        self.rep.save()


@dataclass
class Preset:
    """A built model and what its runs share: prompts, the generator their random tokens come from, its rows."""

    name: str
    model: torch.nn.Module
    info: dict  # the report's presets[name]
    batches: list[int]
    gen: torch.Generator
    prompts: list[list[int]]  # max(batches) prompts of --prompt-len tokens
    check_prompts: list[list[int]]  # the numerics check's, past the sliding window
    todo: list = field(default_factory=list)  # (row, groups) of each selection measured
    distinct: dict = field(default_factory=dict)  # the groups' signature -> the rows measured with them
    ref_groups: dict | None = None  # a model-dtype selection's groups on TORCH_REFERENCE (the HF check's)
