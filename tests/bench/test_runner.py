"""kselect bench (kselect/benchmarks/runner.py): experiment configs composed with Hydra, each step's options turned into
its command line, steps run in order from the checkout root, and dry_run=true checking every command line with the
program's own parser without running it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kselect.benchmarks import runner

ROOT = Path(__file__).resolve().parents[2]

# A program with an argument parser: appends its --tag to --log, or exits with --rc.
TOOL = '''import argparse, sys
ap = argparse.ArgumentParser()
ap.add_argument("--log", required=True)
ap.add_argument("--tag", required=True)
ap.add_argument("--rc", type=int, default=0)
o = ap.parse_args()
with open(o.log, "a") as f:
    f.write(o.tag + "\\n")
sys.exit(o.rc)
'''


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with the real bench/conf/bench.yaml, a tool script and one experiment of three steps."""
    conf = tmp_path / "bench" / "conf"
    (conf / "experiment").mkdir(parents=True)
    shutil.copy(ROOT / "bench" / "conf" / "bench.yaml", conf / "bench.yaml")
    (tmp_path / "bench" / "tool.py").write_text(TOOL)
    (conf / "experiment" / "three.yaml").write_text("""# @package _global_
name: three
steps:
  first: {run: bench/tool.py, args: {log: "${out}/log.txt", tag: a}}
  second: {run: bench/tool.py, args: {log: "${out}/log.txt", tag: b, rc: 0}}
  third: {run: bench/tool.py, args: {log: "${out}/log.txt", tag: c}}
""")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_options_become_the_command_line_in_config_order():
    step = runner.Step(run="m", args={"out": "/o", "flag": True, "off": False, "unset": None, "kv": ["auto", "fp8"],
                                      "lens": [], "n": 3}, argv=["pos"])
    assert runner.argv_of(step) == ["--out", "/o", "--flag", "--kv", "auto", "fp8", "--lens", "--n", "3", "pos"]
    exp = runner.Experiment(name="x", out="/o", python="py", steps={"s": step})
    assert runner.command(exp, step)[:3] == ["py", "-m", "m"]
    assert runner.command(exp, runner.Step(run="bench/x.py"))[:2] == ["py", "bench/x.py"]


def test_steps_run_in_order_from_the_checkout_and_a_failing_one_stops_the_rest(checkout, tmp_path):
    out = tmp_path / "out"
    assert runner.main(["experiment=three", f"out={out}"]) == 0
    assert (out / "log.txt").read_text() == "a\nb\nc\n"
    (out / "log.txt").unlink()
    assert runner.main(["experiment=three", f"out={out}", "steps.second.args.rc=3"]) == 3
    assert (out / "log.txt").read_text() == "a\nb\n"


def test_dry_run_checks_every_command_line_and_runs_nothing(checkout, tmp_path, capsys):
    out = tmp_path / "out"
    assert runner.main(["experiment=three", f"out={out}", "dry_run=true"]) == 0
    assert not out.exists()
    assert "=== third: " in capsys.readouterr().out
    assert runner.main(["experiment=three", f"out={out}", "dry_run=true", "steps.second.args.rc=many"]) == 2
    err = capsys.readouterr().err
    assert "argument --rc: invalid int value: 'many'" in err and "steps.second.run: its parser refused" in err
    assert not out.exists()


@pytest.mark.parametrize("overrides,expected", [
    (["experiment=nope"], "experiment: bad value 'nope'; allowed: three"),
    ([], "experiment: bad value none; allowed: three"),
    (["experiment=three", "+steps.first.timeout=5"], "steps.first.timeout: unknown key"),
    (["experiment=three", "steps.first.run=bench/missing.py", "dry_run=true"], "bad value 'bench/missing.py'"),
])
def test_bad_input_is_one_paragraph_and_exit_2(checkout, capsys, overrides, expected):
    assert runner.main(overrides) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("\n") == 1


def test_outside_a_checkout_it_says_where_to_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert runner.main(["experiment=x"]) == 2
    assert "run it from the kselect checkout" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "bench" / "conf" / "experiment").glob("*.yaml")))
def test_every_experiment_of_the_repo_checks_out(name, monkeypatch):
    """It composes, each step's parser takes its command line, and the records it names are in bench/results."""
    monkeypatch.chdir(ROOT)
    assert runner.main([f"experiment={name}", "dry_run=true"]) == 0
    records = runner.compose(ROOT, [f"experiment={name}"]).records
    assert all(r.startswith("bench/results/") and (ROOT / r).is_dir() for r in records), records


def test_an_experiment_shares_the_window_options_and_overrides_them():
    exp = runner.compose(ROOT, ["experiment=rounds_e31p"])
    args = exp.steps["e2e"].args
    assert args["rules"] == "vllm_0_33_0" and args["no-hf"] is True  # bench/conf/e2e/window.yaml
    assert args["prefill-rounds"] == 1001 and args["prefill-lens"] == [] and args["selections"] == ["vllm", "latency"]
    assert list(exp.steps) == ["e2e", "explain"] and exp.records == ["bench/results/h200/rounds1001/E31P"]
    assert runner.compose(ROOT, ["experiment=rounds_e31p", "out=/x"]).steps["e2e"].args["out"] == "/x/e2e_31b"


def test_a_bare_checkout_goes_first_on_the_steps_pythonpath(tmp_path, monkeypatch):
    """As the H200 windows ran (no install): scripts under bench/ import the checkout's kselect. Installed, the
    environment is left as it is."""
    import importlib.metadata as md

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert runner.step_environ(tmp_path, {"A": "1"})["PYTHONPATH"] == "/elsewhere"

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "distribution", missing)
    env = runner.step_environ(tmp_path, {"A": "1"})
    assert env["PYTHONPATH"] == f"{tmp_path}:/elsewhere" and env["A"] == "1"
