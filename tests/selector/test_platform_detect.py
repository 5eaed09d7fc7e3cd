"""`platform=auto` on a machine no GPU is reachable from: the CPU preset without importing torch (a second of a bare
`kselect select`); with a GPU device node, torch decides as before."""

from __future__ import annotations

import subprocess
import sys

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
