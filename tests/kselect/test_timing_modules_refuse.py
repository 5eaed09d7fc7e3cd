"""The kernel-timing modules as a user runs them (`python3 -m ...` in its own process) with no GPU visible: exit 2,
one line naming the module, nothing written."""

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("name", ["skinny_swap", "attn_small_b16", "gemv"])  # bench/results/h100/swap_ab/, off32_swap/A16/
def test_refuses_in_one_line_without_cuda(name, tmp_path):
    r = subprocess.run([sys.executable, "-m", f"kselect.measurement.kernels.{name}", "--out", str(tmp_path / "S")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert (r.returncode, r.stdout, r.stderr.strip()) == (2, "", f"{name}: needs a CUDA GPU (it times kernels)")
    assert not (tmp_path / "S").exists()


def test_the_projection_sweep_refuses_an_unknown_shape(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.kernels.gemv", "--out", str(tmp_path / "S"),
                        "--shapes", "o", "nope"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--shapes: invalid choice: 'nope'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "S").exists()
