"""Hydra multirun sweeps (basic and joblib launchers) writing selection.json per job, and
`kselect gather` reading them back into one table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kselect.commands.gather import main as gather_main
from kselect.selector.review.sweep import matrix_overrides

ROOT = Path(__file__).resolve().parents[2]


def run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HYDRA_FULL_ERROR": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _jobs(d: Path) -> list[dict]:
    return [json.loads((d / str(i) / "selection.json").read_text()) for i in range(len(list(d.glob("*/selection.json"))))]


def test_basic_launcher_every_outcome_and_gather(tmp_path, capsys):
    out = tmp_path / "basic"
    p = run("kselect.commands.sweep", "-m", "platform=cpu,sm90", "model=gemma4_31b", "kv_cache=auto,fp8",
            "kv_cache.scales=calibrated", "attention.backend=TRITON_ATTN", f"hydra.sweep.dir={out}", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    jobs = _jobs(out)
    assert [j["outcome"] for j in jobs] == ["config error", "invalid", "config error", "ok"]
    assert jobs[0]["overrides"][:2] == ["platform=cpu", "model=gemma4_31b"] and "kv_cache.scales" in jobs[0]["error"]
    assert "TRITON_ATTN" in jobs[1]["error"] and jobs[3]["job"] == {"num": 3, "launcher": "basic"}
    assert {g["backend"] for g in jobs[3]["selection"]["groups"]} == {"TRITON_ATTN"}
    assert gather_main([str(out)]) == 0
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    assert lines[0] == f"{out}: 4 jobs"
    row = next(x for x in lines if x.startswith("3 "))
    assert "platform=sm90" in row and "ok" in row and "TRITON_ATTN kv64" in row  # default rules vllm_0_34_0: block 64
    assert "[1] invalid: Selected backend TRITON_ATTN" in stdout
    gather_main([str(out), "format=markdown"])
    assert "| job | overrides | outcome |" in capsys.readouterr().out


def test_joblib_launcher(tmp_path, capsys):
    out = tmp_path / "joblib"
    p = run("kselect.commands.sweep", "-m", "platform=cpu,sm90", "model=gemma4_31b", "kv_cache=fp8", "model.multimodal=true", "rules=post_pr52987", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={out}", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    jobs = _jobs(out)
    assert [j["outcome"] for j in jobs] == ["ok", "ok"]
    assert {j["job"]["launcher"] for j in jobs} == {"joblib"}
    assert {g["backend"] for g in jobs[1]["selection"]["groups"]} == {"TRITON_ATTN"}
    gather_main([str(out), "format=json"])
    assert [j["overrides"][0] for j in json.loads(capsys.readouterr().out)] == ["platform=cpu", "platform=sm90"]


def test_matrix_axes_become_sweep_overrides():
    assert matrix_overrides("smoke") == [
        "platform=cpu,sm90", "model=gemma4_tiny,gemma4_31b", "kv_cache=auto,fp8", "kv_cache.scales=unit,calibrated",
        "spec_decode=none,mtp", "model.multimodal=false,true",
    ]  # fmt: skip  (smoke declares no rules: the sweep runs the default release, as select does)
    assert matrix_overrides("seed_smoke")[-1] == "rules=post_pr52987"  # the seed story names its rules


def test_gather_errors(tmp_path):
    p = run("kselect.commands.gather", str(tmp_path), cwd=tmp_path)  # the exit status of a CLI error
    assert p.returncode == 2 and "no selection.json" in p.stderr
