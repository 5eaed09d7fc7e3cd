"""kselect/measurement/probes/attn_ncu.py off the GPU: what it keeps of ncu's pages, and its refusal without CUDA."""

from kselect.measurement.probes import attn_ncu

DETAILS = """==PROF== Connected to process 1
  _attn_fwd (1, 2, 16)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    Elapsed Cycles                cycle       16,856
    Duration                         us         8.54
    Duration                         us         9.99
    Stall Wait                      inst         1.59
    Stall Long Scoreboard           inst         1.33
    Grid Size                                     32
    OPT   Est. Local Speedup: 97.94%
  _merge_splits (1, 8, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                         us         4.10
  _attn_fwd (1, 2, 16)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                         us         7.00
"""


def test_metrics_keep_each_kernels_first_launch_and_first_value():
    lines = attn_ncu.metrics(DETAILS, "sliding")
    text = "\n".join(lines)
    assert lines[0] == "## sliding: _attn_fwd (1, 2, 16)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"
    assert "8.54" in text and "9.99" not in text and "7.00" not in text  # first value, first launch
    assert text.count("## sliding:") == 2 and "_merge_splits" in text and "4.10" in text
    assert "Stall Wait" in text and "Stall Long Scoreboard" in text and "Grid Size" in text
    assert "Speedup" not in text


def test_sass_table_keeps_four_columns_and_an_index():
    src = ('"Kernel Name","_attn_fwd",\n'
           '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
           '"# Samples","Instructions Executed"\n'
           '"0x1","      LDC R1, c[0x0][0x28]","4","3","4","128"\n'
           '"0x2","  IMAD R2, R3, R4, RZ","7","0","7","256"\n')
    rows = attn_ncu.sass_table(src).splitlines()
    assert rows[0] == ("index,Source,Warp Stall Sampling (All Samples),Warp Stall Sampling (Not-issued Samples),"
                       "Instructions Executed")
    assert rows[1] == '0,"LDC R1, c[0x0][0x28]",4,3,128' and rows[2] == '1,"IMAD R2, R3, R4, RZ",7,0,256'


def test_refuses_without_cuda_or_ncu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert attn_ncu.main(["--out", str(tmp_path / "N")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attn_ncu: needs a CUDA device") and "\n" not in err
    assert not (tmp_path / "N").exists()


def test_batch_is_checked_before_anything_runs(capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        attn_ncu.main(["--out", "x", "--batch", "17"])
    assert e.value.code == 2 and "--batch" in capsys.readouterr().err


def test_the_module_refuses_in_one_line_without_cuda(tmp_path):
    """As a user runs it (`python3 -m ...` in its own process, no GPU visible): exit 2, one line, no traceback."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", attn_ncu.MODULE, "--out", str(tmp_path / "N")], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("attn_ncu: needs a CUDA device") and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "N").exists()
