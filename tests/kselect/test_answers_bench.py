"""kselect/measurement/answers.py (#50): every figure records wall and CPU seconds, beside the same run's baselines,
and the record says when it was made under load. Nothing here times kselect: the figures are made up."""

from __future__ import annotations

import sys

from kselect.measurement import answers


def _fig(wall: float, cpu: float) -> dict:
    return {"command": "x", **answers._stats([(wall, cpu), (wall * 2, cpu), (wall, cpu * 3)])}


def _doc(load: float) -> dict:
    figures = {"baselines": {"python -c pass": _fig(0.02, 0.02), "python -c 'import hydra'": _fig(0.1, 0.1)}}
    for k in ("help", "select_first_run", "select_cold", "select_warm", "select_auto_warm", "diff_latency", "claims"):
        figures[k] = _fig(0.4, 0.3)
    for k in ("bulk_cold", "bulk_warm"):
        figures[k] = {"command": "bulk", "cells": 10, "wall_s": 0.01, "cpu_s": 0.02, "cells_per_s": 1000.0,
                      "cells_per_cpu_s": 500.0}
    meta = {"command": "c", "commit": "abc", "dirty": False, "python": "3", "cpus": 2, "load_before": [load, 0, 0],
            "load_after": [load, 0, 0], "date": "d", "versions": {}}
    doc = {"meta": meta, "figures": figures}
    doc["met"] = answers.verdicts(figures)
    return doc


def test_stats_keep_wall_and_cpu_of_every_run():
    s = answers._stats([(1.0, 0.5), (3.0, 0.7), (2.0, 0.6)])
    assert (s["p50_s"], s["cpu_p50_s"], s["runs"]) == (2.0, 0.6, 3)
    assert s["all_s"] == [1.0, 3.0, 2.0] and s["all_cpu_s"] == [0.5, 0.7, 0.6]


def test_timed_counts_the_child_cpu(tmp_path):
    wall, cpu = answers._timed([sys.executable, "-c", "sum(range(3_000_000))"], tmp_path)
    assert wall > 0 and cpu > 0


def test_report_lists_the_five_figures_with_cpu_and_baselines():
    text = answers.report(_doc(0.1))
    for name in ("python -c pass", "import hydra", "help", "select_cold", "select_warm", "select_auto_warm",
                 "diff_latency", "claims", "bulk_warm"):
        assert f"| {name}" in text or name in text
    assert "p50 CPU" in text and "| 0.300 s |" in text  # the CPU column of select/diff/claims
    assert "quiet: 1-minute load average at most 0.1" in text


def test_report_says_when_it_was_made_under_load():
    assert "**made under load**: 1-minute load average up to 6.5 on 2 CPUs" in answers.report(_doc(6.5))
