"""Every `kselect <command>` that takes overrides is a real Hydra app: --cfg job, Hydra's help (--help-all),
-m with two values and hydra.run.dir=X behave as in any Hydra app; a plain run leaves nothing
behind; old spellings of the overlay key exit 2 naming the new one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def kselect(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "kselect", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_cfg_job_prints_the_composed_config_and_resolves_nothing(tmp_path):
    p = kselect("select", "--cfg", "job", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cfg = yaml.safe_load(p.stdout)
    assert cfg["platform"]["name"] == "sm90" and cfg["kv_cache"]["dtype"] == "fp8" and cfg["model"]["name"] == "gemma4_31b"
    assert "backend" not in p.stdout.split("attention:")[0]  # no selection table
    assert list(tmp_path.iterdir()) == []  # no outputs/, no log


@pytest.mark.parametrize("command", ["explain", "run"])
def test_every_override_command_is_a_hydra_app(tmp_path, command):
    p = kselect(command, "--cfg", "job", "platform=sm90", "model=gemma4_31b", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert yaml.safe_load(p.stdout)["platform"]["name"] == "sm90"
    h = kselect(command, "--help-all", cwd=tmp_path)  # Hydra's help (--help: a page, test_cli_conventions.py)
    assert h.returncode == 0 and f"kselect {command} [" in h.stdout.splitlines()[0] and "== Configuration groups ==" in h.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command,answer", [("explain", "Is an FP8 KV cache faster"), ("claims", "FLASH_ATTN"),
                                            ("select", "full_attention")])
def test_overrides_alone_answer_through_the_console_script_and_bad_ones_exit_2(tmp_path, command, answer):
    """The plain path (kselect/commands/plain.py: one compose, no Hydra app) as a user runs it, the `kselect` script
    of this environment: an answer and exit 0, or for an option no config has, exit 2 and one paragraph."""
    script = Path(sys.executable).parent / "kselect"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "kselect"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    run = lambda *a: subprocess.run([*argv, command, *a], cwd=tmp_path, capture_output=True, text=True,  # noqa: E731
                                    timeout=300, env=env)
    ok = run("platform=sm90", "model=gemma4_e4b")
    assert ok.returncode == 0 and answer in ok.stdout, ok.stderr
    bad = run("platform=nope")
    assert bad.returncode == 2 and "platform=nope" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert "\n\n" not in bad.stderr.strip() and list(tmp_path.iterdir()) == []


def test_help_is_hydras_with_the_commands_text(tmp_path):
    p = kselect("claims", "--help-all", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("List the capability claims")
    assert "== Configuration groups ==" in p.stdout and "platform: a100, auto, b200, cpu" in p.stdout
    d = kselect("diff", "--help-all", cwd=tmp_path)
    assert d.returncode == 0 and "a:\n  conf: worktree\n  overlay: []" in d.stdout


@pytest.mark.parametrize("args", [["--info"], ["--info", "defaults"], ["-i", "platform=sm90"]])
def test_info_with_or_without_its_value(tmp_path, args):
    """--info's value is optional (Hydra's default: all); kselect's own leading overrides never become it."""
    p = kselect("select", *args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Defaults List" in p.stdout and "invalid choice" not in p.stderr
    if args[1:] != ["defaults"]:
        assert "Config search path" in p.stdout  # `all`
    assert list(tmp_path.iterdir()) == []


def test_multirun_two_values_and_run_dir(tmp_path):
    sweep_dir = tmp_path / "sw"
    p = kselect("select", "-m", "platform=sm80,sm90", "model=gemma4_31b", "output=json", f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "#0 : platform=sm80" in p.stdout and "#1 : platform=sm90" in p.stdout  # Hydra's launcher log
    docs = [json.loads(d) for d in re.findall(r"^\{$.*?^\}$", p.stdout, re.M | re.S)]
    assert [d["environment"]["platform"] for d in docs] == ["sm80", "sm90"]
    assert sorted(x.name for x in sweep_dir.iterdir()) == ["0", "1", "multirun.yaml"]
    assert (sweep_dir / "1" / ".hydra" / "overrides.yaml").is_file()
    run_dir = tmp_path / "X"
    p = kselect("select", "platform=sm90", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert p.returncode == 0 and "FLASH" in p.stdout
    assert yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) == ["platform=sm90"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["X", "sw"]


def test_diff_multirun_one_diff_per_value(tmp_path):
    p = kselect("diff", "-m", "b.overlay=[pr48666],[pr53175]", "matrix=seed_smoke", f"hydra.sweep.dir={tmp_path / 'm'}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    heads = [x for x in p.stdout.splitlines() if x.startswith("kselect diff")]
    assert [h.split(" over ")[0] for h in heads] == ["kselect diff [] -> [pr48666]", "kselect diff [] -> [pr53175]"]


def test_sweep_without_multirun_prints_one_record_and_writes_nothing(tmp_path):
    p = kselect("sweep", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["outcome"] == "ok" and rec["overrides"][0] == "platform=sm90"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "cmd, args, new",
    [
        ("select", ["overlays=[pr48666]"], "overlay=[pr48666"),
        ("matrix", ["overlays=[pr48666]"], "overlay=[pr48666"),
        ("diff", ["a=[]", "b=[pr48666]"], "a.overlay=[...]"),
        ("plot", ["b=[pr48666]"], "b.overlay=[...]"),
    ],
)
def test_old_overlay_spellings_exit_2_naming_the_new_one(tmp_path, cmd, args, new):
    p = kselect(cmd, *args, cwd=tmp_path)
    assert p.returncode == 2 and "old spelling" in p.stderr and new in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_hydra_compose_errors_are_one_paragraph_exit_2(tmp_path):
    for args in (["model=nope"], ["limit=abc"]):
        p = kselect("select" if args[0].startswith("model") else "diff", *args, cwd=tmp_path)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert "gemma4_31b" in kselect("select", "model=nope", cwd=tmp_path).stderr  # names what is allowed
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_goes_away_is_no_traceback(tmp_path):
    """`kselect run --help | head -1`: the pipe closes early; kselect stops quietly (SIGPIPE: -13, a shell shows 141)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "kselect", "run", "--help-all"], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    p.stdout.read(16)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) in (0, 141, -13) and "Traceback" not in err and "BrokenPipe" not in err, err


def test_two_hydra_modes_are_one_user_error(tmp_path):
    p = kselect("sweep", "-m", "--info", "platform=cpu", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert "--info and --multirun together; allowed: one of --run, --multirun (-m), --cfg, --info" in p.stderr
