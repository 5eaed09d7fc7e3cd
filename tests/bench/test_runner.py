"""kselect bench (kselect/commands/bench.py over kselect/measurement/runner.py): experiment configs composed with
Hydra, each step one of the project's own steps (kselect/measurement/steps.py) with its options validated into that
step's typed options before anything runs; steps run in order from the checkout root, a failing one stops the rest;
dry_run=true prints what would run and runs nothing; bad input is exit 2 and one paragraph naming the key."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from kselect.commands import bench
from kselect.measurement import runner, steps

ROOT = Path(__file__).resolve().parents[2]

# Stands in for the interpreter (`python=...`): logs the step it was asked to run, exits with the step's rc from
# $RC_<step> (0 unset), so order and stopping are seen without running a measurement.
FAKE_PYTHON = """#!/bin/sh
echo "$3 $4" >> "$LOG"
eval "exit \\${RC_$3:-0}"
"""


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with the real bench/conf/bench.yaml and one experiment of three project steps."""
    conf = tmp_path / "bench" / "conf"
    (conf / "experiment").mkdir(parents=True)
    shutil.copy(ROOT / "bench" / "conf" / "bench.yaml", conf / "bench.yaml")
    (conf / "experiment" / "three.yaml").write_text("""# @package _global_
name: three
steps:
  first: {run: e2e, options: {out: "${out}/e2e", smoke: true}}
  second: {run: prefill_clocks, options: {out: "${out}/clocks", rounds: 2}}
  third: {run: explain_vs_e2e, options: {e2e: "${out}/e2e/e2e.json", model: gemma4_tiny, out: "${out}/x.md"}}
""")
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    monkeypatch.setenv("LOG", str(tmp_path / "log.txt"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _log(checkout: Path) -> list[str]:
    log = checkout / "log.txt"
    return log.read_text().splitlines() if log.exists() else []


def test_steps_run_in_order_on_their_typed_options_and_a_failing_one_stops_the_rest(checkout, monkeypatch):
    out = checkout / "out"
    assert bench.main(["experiment=three", f"out={out}", f"+python={checkout / 'fakepython'}"]) == 0
    assert [line.split()[0] for line in _log(checkout)] == ["e2e", "prefill_clocks", "explain_vs_e2e"]
    first = json.loads((out / "first.json").read_text())  # the options file the step runs on: every field, typed
    assert first["smoke"] is True and first["out"] == f"{out}/e2e" and first["reps"] == 3
    (checkout / "log.txt").unlink()
    monkeypatch.setenv("RC_prefill_clocks", "3")
    assert bench.main(["experiment=three", f"out={out}", f"+python={checkout / 'fakepython'}"]) == 3
    assert [line.split()[0] for line in _log(checkout)] == ["e2e", "prefill_clocks"]


def test_dry_run_prints_what_would_run_and_runs_nothing(checkout, capsys):
    out = checkout / "out"
    assert bench.main(["experiment=three", f"out={out}", f"+python={checkout / 'fakepython'}", "dry_run=true"]) == 0
    shown = capsys.readouterr().out
    assert "=== third: " in shown and "kselect.measurement.steps explain_vs_e2e" in shown and '"rounds": 2' in shown
    assert _log(checkout) == [] and not out.exists()


def test_debug_is_the_command_flag_not_an_override(checkout, capsys, monkeypatch):
    """`kselect --debug bench ...` (kselect/cli.py passes it on): the command's flag, as every tool command's; it was
    composed as an override before and failed Hydra's grammar."""
    argv = ["--debug", "experiment=three", f"+python={checkout / 'fakepython'}", "dry_run=true"]
    monkeypatch.setattr(sys, "argv", ["kselect bench", *argv])
    with pytest.raises(SystemExit) as end:
        bench.cli()
    assert end.value.code == 0
    assert "=== third: " in capsys.readouterr().out and _log(checkout) == []


def test_a_script_named_as_a_step_is_refused_and_never_runs(checkout, capsys):
    marker = checkout / "marker"
    script = checkout / "probe.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for dry in ("true", "false"):
        assert bench.main(["experiment=three", f"steps.first.run={script}", f"dry_run={dry}"]) == 2
        err = capsys.readouterr().err
        assert "steps.first.run: bad value" in err and "e2e, prefill_clocks, explain_vs_e2e" in err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not marker.exists() and _log(checkout) == []


@pytest.mark.parametrize("overrides,expected", [
    (["experiment=nope"], "experiment: bad value 'nope'; allowed: three"),
    ([], "experiment: bad value none; allowed: three"),
    (["experiment=three", "+steps.first.timeout=5"], "steps.first.timeout: unknown key"),
    (["experiment=three", "steps.first.run=bench/missing.py"], "steps.first.run: bad value 'bench/missing.py'"),
    (["experiment=three", "out="], "out: bad value ''"),
    (["experiment=three", "out=/etc/passwd"], "out=/etc/passwd: an existing file"),
    (["experiment=three", "out=/dev/null/x"], "out=/dev/null/x: /dev/null is not a folder"),
    (["experiment=three", "steps.second.options.out=/dev/null/x"], "steps.second.options.out=/dev/null/x"),
    (["experiment=three", "+steps.first.timeout_s=0"], "steps.first.timeout_s"),
    (["experiment=three", "+steps.first.timeout_s=-5"], "steps.first.timeout_s"),
    (["experiment=three", "+python=/nonexistent/python"], "python: bad value '/nonexistent/python'"),
    (["experiment=three", "+python=no-such-python-3"], "python: bad value 'no-such-python-3'"),
    (["experiment=three", "hydra.run.dir=/tmp/elsewhere"], "hydra.run.dir is a Hydra setting"),
    (["experiment=three", "+steps.first.options.reps=many"], "steps.first.options.reps: Input should be a valid integer"),
    (["experiment=three", "+steps.first.options.budget-s=5"], "steps.first.options.budget-s: unknown option"),
    (["experiment=three", "+steps.first.options.prefill_graph_tokens=3"], "steps.first.options.prefill_graph_tokens: Value error"),
])  # fmt: skip
def test_bad_input_is_one_paragraph_and_exit_2(checkout, capsys, overrides, expected):
    assert bench.main([*overrides, f"+python={checkout / 'fakepython'}"] if "python" not in str(overrides)
                       else overrides) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("\n") == 1, err
    assert _log(checkout) == []


def test_outside_a_checkout_it_says_where_to_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bench.main(["experiment=x"]) == 2
    assert "run it from the kselect checkout" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "bench" / "conf" / "experiment").glob("*.yaml")))
def test_every_experiment_of_the_repo_checks_out(name, monkeypatch):
    """It composes, each step's options are its typed options, and the records it names are in bench/results."""
    monkeypatch.chdir(ROOT)
    assert bench.main([f"experiment={name}", "dry_run=true"]) == 0
    records = runner.compose(ROOT, [f"experiment={name}"]).records
    assert all(r.startswith("bench/results/") and (ROOT / r).is_dir() for r in records), records


def test_an_experiment_shares_the_window_options_and_overrides_them():
    exp = runner.compose(ROOT, ["experiment=rounds_e31p"])
    options = exp.steps["e2e"].options
    assert options["rules"] == "vllm_0_33_0" and options["no_hf"] is True  # bench/conf/e2e/window.yaml
    assert options["prefill_rounds"] == 1001 and options["prefill_lens"] == [] and options["selections"] == ["vllm", "latency"]
    assert list(exp.steps) == ["e2e", "explain"] and exp.records == ["bench/results/h200/rounds1001/E31P"]
    assert runner.compose(ROOT, ["experiment=rounds_e31p", "out=/x"]).steps["e2e"].options["out"] == "/x/e2e_31b"


def test_a_step_process_runs_the_step_function_on_its_validated_options(tmp_path, monkeypatch):
    """`python -m kselect.measurement.steps <step> <options.json>`: the options file validated into the step's
    Options, then its run(options, command)."""
    (tmp_path / "probe_step.py").write_text(
        "from pydantic import BaseModel\n"
        "class Options(BaseModel):\n    n: int\n"
        "def run(opts, command):\n    print('ran', opts.n * 2, command)\n    return 7\n")  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(steps.STEPS, "probe", "probe_step")
    (tmp_path / "o.json").write_text('{"n": "21"}')
    assert steps.main(["probe", str(tmp_path / "o.json")]) == 7
    (tmp_path / "o.json").write_text('{"n": "x"}')
    with pytest.raises(ValueError):
        steps.main(["probe", str(tmp_path / "o.json")])


def test_a_bare_checkout_goes_first_on_the_steps_pythonpath(tmp_path, monkeypatch):
    """Without an install the checkout goes first on the steps' PYTHONPATH; installed, the environment is left as
    it is."""
    import importlib.metadata as md

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert runner.step_environ(tmp_path, {"A": "1"})["PYTHONPATH"] == "/elsewhere"

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "distribution", missing)
    env = runner.step_environ(tmp_path, {"A": "1"})
    assert env["PYTHONPATH"] == f"{tmp_path}:/elsewhere" and env["A"] == "1"
    assert sys.executable  # the default interpreter of every step
