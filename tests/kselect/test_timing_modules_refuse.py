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


@pytest.mark.parametrize("args,says", [
    (["--step-table-from", "{missing}", "--step-source", "s"], "gemv: cannot write the table from"),
    (["--step-table-from", "{bad}", "--step-source", "s"], "gemv: cannot write the table from"),
    (["--table-from", "{bad}"], "gemv: cannot write the table from"),
    (["--step-table-from", "{bad}"], "--step-table-from needs --step-source"),
    (["--rows", "16"], "--out is required to time kernels"),
])
def test_the_table_modes_refuse_bad_records_in_one_paragraph(args, says, tmp_path):
    """A record that is missing or not the sweep's JSON, or a step table without its source: exit 2, no traceback,
    and the table files are left as they were."""
    (tmp_path / "bad.json").write_text('{"rows": [{"n": 1}]}')
    out = tmp_path / "table.json"
    args = [a.format(missing=tmp_path / "none.json", bad=tmp_path / "bad.json") for a in args]
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.kernels.gemv", *args, "--table-out", str(out),
                        "--step-table-out", str(out)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_the_step_table_mode_writes_the_records_card(tmp_path):
    import json

    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(dict(device="C", rows=[dict(n=8, k=16, rows=16, triton=dict(cfg={"split_k": 1}))])))
    out = tmp_path / "step.json"
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.kernels.gemv", "--step-table-from", str(rec),
                        "--step-source", "a step", "--step-table-out", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == {"C": {"8x16": {"split_k": 1}}, "_sources": {"C": "a step"}}
