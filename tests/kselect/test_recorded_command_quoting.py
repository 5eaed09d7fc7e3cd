"""The command line a measurement writes into its record (the `command:` of conf/conformance and conf/perf files, the
e2e harness's JSON) pastes back as the argv that ran: an empty value (`--prefill ""`) and a path with a space survive."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from kselect.commands import conformance, e2e, perf, perf_steps

ARGV = {
    "conformance": (conformance, ["--claims", "a b/claims.txt", "--out", "out dir/x.yaml", "--gpu-name", "cpu_x"]),
    "perf": (perf, ["--gpu-name", "cpu_x", "--out", "out dir/p.yaml", "--decode", "1x512", "--prefill", ""]),
    "perf-steps": (perf_steps, ["--gpu-name", "cpu_x", "--prefill", "512", "--out", "$(touch X).yaml"]),
}


@pytest.mark.parametrize("name", sorted(ARGV))
def test_the_recorded_command_is_the_argv_that_ran(name, monkeypatch):
    module, argv = ARGV[name]
    seen = []
    library = {"conformance": "conformance", "perf": "perf", "perf-steps": "perf_steps"}[name]
    monkeypatch.setattr(getattr(module, library), "run", lambda opts, command: seen.append(command) or 0)
    assert module.main(argv) == 0
    assert shlex.split(seen[0]) == ["kselect", name, *argv]


def test_the_e2e_harness_records_the_argv_that_ran(monkeypatch):
    argv = ["--out", "out dir/e2e", "--platform", "cpu", "--skip", "", "--smoke"]
    seen = []
    monkeypatch.setattr(e2e.e2e, "run", lambda opts, command: seen.append(command) or 0)
    assert e2e.main(argv) == 0
    assert shlex.split(seen[0]) == [Path(sys.executable).name, "-m", "kselect.measurement.e2e", *argv]


def test_a_bench_step_records_the_command_that_ran_it(monkeypatch, tmp_path):
    """`kselect bench` runs each step as `python -m kselect.measurement.steps <step> <options.json>` (the options file
    is kept beside the outputs): that command, quoted, is what the step's record says."""
    from kselect.measurement import explain_vs_e2e, steps

    path = tmp_path / "out dir" / "x.json"
    path.parent.mkdir()
    path.write_text('{"e2e": "a b/e2e.json", "model": "gemma4_tiny", "out": "out dir/x.md"}')
    seen = []
    monkeypatch.setattr(explain_vs_e2e, "run", lambda opts, command: seen.append(command) or 0)
    assert steps.main(["explain_vs_e2e", str(path)]) == 0
    assert shlex.split(seen[0]) == [Path(sys.executable).name, "-m", "kselect.measurement.steps", "explain_vs_e2e",
                                    str(path)]
