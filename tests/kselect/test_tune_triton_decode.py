"""kselect.measurement.kernels.tune_triton_decode: its case sets and bad input (the sweep itself needs a GPU)."""
import subprocess
import sys

import pytest

from kselect.measurement.kernels import tune_triton_decode as tune


def test_an_unknown_case_is_exit_2_naming_the_sets_cases_before_any_gpu_work(tmp_path):
    """As a user runs it (`python -m`, through its run_script entry point): exit 2, one paragraph, no traceback."""
    p = subprocess.run([sys.executable, "-m", "kselect.measurement.kernels.tune_triton_decode", "--out",
                        str(tmp_path / "o"), "--small", "--cases", "e4b_sliding_b16,nope"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "--cases: nope unknown" in p.stderr and "e4b_full_b16" in p.stderr and "31b_full_d512" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_the_small_grid_sweeps_the_warps_asked_for_with_the_default_first():
    default = (64, 4, 2, 0, 4)
    grid = tune.small_grid(256, "bf16", default, warps=(4, 8))
    assert grid[0] == default and len(grid) == len(set(grid))
    assert {c[1] for c in grid} == {4, 8} and {c[4] for c in grid} == {1, 2, 3, 4}
    assert {c[1] for c in tune.small_grid(256, "bf16", default)} == {4}


@pytest.mark.parametrize("flag, value, says", [("--warps", "4,x", "'4,x': comma-separated warp counts"),
                                               ("--warps", "3", "each one of 1, 2, 4, 8, 16"),
                                               ("--per-sm", "0", "'0': a positive integer")])
def test_bad_warps_or_programs_an_sm_are_exit_2_naming_the_flag(monkeypatch, capsys, tmp_path, flag, value, says):
    monkeypatch.setattr(sys, "argv", ["tune", "--out", str(tmp_path / "o"), "--small", flag, value])
    with pytest.raises(SystemExit) as e:
        tune.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and says in err
