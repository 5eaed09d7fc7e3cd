"""Cells that choose by measurement, resolved on every core the process may use (matrix.resolve_cells).

An objective other than `vllm` searches every combination of per-group backends (selector/measure/objective.py):
tens of milliseconds a cell, where vLLM's own selection takes well under one. Over a matrix of thousands of such
cells (`kselect diff b.objective=latency`) the cells are split into runs of neighbouring cells (a matrix lists the
pins of one environment next to each other, and the search keeps what they share: selector/measure/pins.py),
resolved in forked workers, and returned in matrix order. Each cell is resolved exactly as in one process, so the
answers are the same; `KSELECT_JOBS=1` resolves in this process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from ..base.errors import KSelectError, SelectionError
from ..evidence.evidence import Evidence
from ..measure.select import select

MIN_CELLS = 256  # fewer searched cells than this: starting workers costs more than it saves
RUN = 48  # cells per task: a multiple of a matrix's pins, so neighbours stay together

_WORK: tuple = ()  # (configs, evidence) of the resolution in progress, inherited by the forked workers


def jobs() -> int:
    """Workers to use: KSELECT_JOBS, else the CPUs this process may run on."""
    text = os.environ.get("KSELECT_JOBS", "").strip()
    if not text:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise KSelectError(f"KSELECT_JOBS={text!r}: allowed: a whole number of workers from 1 to 256 (1: no workers)")
    return int(text)


def worth_it(configs: Sequence) -> bool:
    searched = sum(1 for cfg in configs if cfg.objective.name != "vllm")
    return searched >= MIN_CELLS and jobs() > 1 and "fork" in multiprocessing.get_all_start_methods()


def outcomes(configs: Sequence, evidence: Evidence) -> list[tuple]:
    """Per config (selection, failure, rejected), in order, resolved by forked workers; a run a worker could not
    finish (an error other than a refused selection) is resolved here again, so its error is raised here."""
    global _WORK
    _WORK = (configs, evidence)
    runs = [(i, min(i + RUN, len(configs))) for i in range(0, len(configs), RUN)]
    try:
        with ProcessPoolExecutor(jobs(), mp_context=multiprocessing.get_context("fork")) as pool:
            done = list(pool.map(_run, runs))
    finally:
        _WORK = ()
    out: list[tuple] = []
    for (start, stop), got in zip(runs, done):
        out.extend(got if got is not None else [_one(cfg, evidence) for cfg in configs[start:stop]])
    return out


def _run(span: tuple[int, int]) -> list[tuple] | None:
    configs, evidence = _WORK
    try:
        return [_one(cfg, evidence) for cfg in configs[span[0]:span[1]]]
    except Exception:  # noqa: BLE001 - resolved again in the parent, which raises it as one process would
        return None


def _one(cfg, evidence: Evidence) -> tuple:
    try:
        return select(cfg, evidence), None, {}
    except SelectionError as e:
        return None, e.failure, dict(e.rejected)
