"""Typed records of the measured figures behind an objective's choice (selector/measure/objective.py).

Human text is rendered from these (selector/export/render.py), never parsed back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Frozen):
    """One backend's measured time at the objective's operating point."""

    backend: str  # label, e.g. "FLASH_ATTN v4"
    ms: float  # per layer call, at the nearest measured bucket
    bucket: str  # conf/perf/<gpu>.yaml entry id
    kernel_ms: float | None = None  # set when ms is not the kernels' time (host-bound, or a plan's share): theirs
    fence: str = ""  # how the bucket was timed (PerfEntry.fence): "" back to back, "gemv:1024" fenced
    plan_ms: float | None = None  # prefill: the group's host planning before each step (PerfEntry.plan_ms)
    host_bound: bool = False  # ms is the call's host time
    host_ms: float | None = None  # prefill: one eager call's host time (PerfEntry.host_ms), whether or not it counts
    # the kernel library versions that differ from the release the rules model (selector/evidence/kernel_versions.py), '' if none
    other_version: str = ""

    def text(self) -> str:
        parts = (["host-bound"] if self.host_bound else []) + \
            ([f"+ plan {self.plan_ms:.4g} ms a step over the group's layers"] if self.plan_ms else [])
        note = f" ({', '.join(parts)}: kernels {self.kernel_ms:.4g} ms)" if self.kernel_ms is not None and parts else ""
        fence = f", fence {self.fence}" if self.fence else ""
        return f"{self.backend} {self.ms:.4g} ms{note} [{self.bucket}{fence}]"


class StepFigure(_Frozen):
    """The model's measured eager step at this phase's point: it says whether host time counts."""

    step: str  # conf/perf/<gpu>.yaml steps id
    wall_ms: float
    kernel_ms: float
    host_bound: bool

    def text(self) -> str:
        kind = "host-bound: a call costs at least its host time" if self.host_bound else "GPU-bound: kernel time counts"
        return f"step {self.step} {kind} (wall {self.wall_ms:.4g} ms, kernels {self.kernel_ms:.4g} ms)"


class PhaseEvidence(_Frozen):
    phase: Literal["prefill", "decode"]
    objective: str
    point: str  # "B1 x 8192"
    backend: str  # the backend this phase runs on (label)
    chosen: Figure | None  # None: no measurement covered it (the choice was kept, not guessed)
    runner_up: Figure | None = None
    vllm: Figure | None = None  # vLLM's choice for this group, when it differs from the chosen one
    others: tuple[Figure, ...] = ()  # every other verified, measured candidate, fastest first
    why: str
    step: StepFigure | None = None  # prefill: the measured model step that says whether host time counts

    def figure_of(self, backend: str) -> Figure | None:
        return next((f for f in (self.chosen, *self.others) if f and f.backend == backend), None)

    def text(self) -> str:
        parts = [f"{self.phase} ({self.objective}, {self.point}): {self.chosen.text() if self.chosen else self.backend + ' (no measurement)'}"]
        if self.runner_up:
            parts.append(f"runner-up {self.runner_up.text()}")
        if self.vllm:
            parts.append(f"vLLM's choice {self.vllm.text()}")
        if self.step:
            parts.append(self.step.text())
        return "; ".join(parts) + f" — {self.why}"
