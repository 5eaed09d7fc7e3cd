"""`platform=auto` on a machine no GPU is reachable from: the CPU preset without importing torch (a second of a bare
`kselect select`); with a GPU device node, torch decides as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kselect.selector.config import detect

PROBE = r'''
import json, sys
from kselect.selector.config import detect
p = detect.detect_platform()
print(json.dumps([p["name"], "torch" in sys.modules]))
'''


@pytest.mark.skipif(not detect.no_gpu_reachable(), reason="a GPU device node is here: torch decides")
def test_no_gpu_node_answers_cpu_without_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == '["cpu", false]'


@pytest.mark.skipif(not detect.no_gpu_reachable(), reason="a GPU device node is here: torch decides")
def test_a_bare_select_through_the_console_script_answers_cpu_without_importing_torch(tmp_path):
    """`kselect select` with nothing else, as a user runs it (this environment's `kselect` script): the CPU answer,
    and Python's import log (PYTHONPROFILEIMPORTTIME) names no torch module."""
    script = Path(sys.executable).parent / "kselect"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "kselect"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    run = subprocess.run([*argv, "select"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("platform cpu")
    imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")]
    assert "kselect.selector.config.detect" in imported and not [m for m in imported if m.split(".")[0] == "torch"]


def test_a_gpu_node_or_another_os_leaves_it_to_torch(monkeypatch):
    monkeypatch.setattr(detect.sys, "platform", "linux")
    monkeypatch.setattr(detect.os.path, "exists", lambda p: p == "/dev/nvidiactl")
    assert not detect.no_gpu_reachable()
    monkeypatch.setattr(detect.os.path, "exists", lambda p: False)
    assert detect.no_gpu_reachable()
    monkeypatch.setattr(detect.sys, "platform", "win32")  # no /dev to look at: torch decides
    assert not detect.no_gpu_reachable()
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails: the CPU preset, as before
    assert detect.detect_platform()["name"] == "cpu"
