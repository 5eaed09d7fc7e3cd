"""docs/selecting.md's one-override rule switch, `rules.<id>.enabled=false`, through the `kselect` CLI under the
default release (a release manifest: its rules come from its chain, selector/config/releases.py) (#51)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = ["platform=sm80", "model=llama3_1_8b", "kv_cache=fp8", "verbose=true"]
GATE = "[fa-kv_dtype_version_gate]"


def kselect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kselect", *args], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_documented_override_disables_the_rule_under_the_default_release():
    on = kselect("select", *ENV)
    off = kselect("select", *ENV, "rules.fa-kv_dtype_version_gate.enabled=false")
    assert on.returncode == 0 and GATE in on.stdout, on.stderr
    assert off.returncode == 0, off.stderr
    assert GATE not in off.stdout and "rejected FLASH_ATTN: FP8 KV requires" in off.stdout
    assert "rules vllm_0_34_0;" in off.stdout  # the release as named, not its root


def test_a_plus_prefix_names_only_what_the_user_typed():
    p = kselect("select", *ENV, "+rules.fa-kv_dtype_version_gate.enabled=false")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "remove + prefix" in p.stderr and "vllm_0_32_0" not in p.stderr


def test_a_sweep_job_takes_the_override_too():
    import json

    p = kselect("sweep", "platform=sm80", "model=llama3_1_8b", "kv_cache=fp8", "rules.fa-kv_dtype_version_gate.enabled=false")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["outcome"] == "ok" and rec["selection"]["environment"]["rules"] == "vllm_0_34_0"
    rejected = rec["selection"]["groups"][0]["rejected"]["FLASH_ATTN"]
    assert "fa-kv_dtype_version_gate" not in json.dumps(rejected) and "fa-fp8_kv_combination" in json.dumps(rejected)
