"""Issue #17's first done-when, checked on the committed files: `conf/perf/nvidia_h200.yaml` holds a figure for
every verified H200 claim the runner can time, at the runner's default buckets and every page the objective
reaches for the bundled models (`kselect perf --missing --dry-run`, which needs no GPU with --platform)."""

from __future__ import annotations

import shutil

import yaml

from kselect.commands import perf as perf_command
from kselect.selector.evidence.perf_data import PERF_DIR

H200 = ["--gpu-name", "nvidia_h200", "--platform", "sm90", "--rules", "vllm_0_33_0,post_pr52987", "--missing", "--dry-run"]


def dry_run(capsys, *extra) -> list[str]:
    assert perf_command.main([*H200, *extra]) == 0
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("would time ")]


def dry_run_all(capsys, *extra) -> list[str]:
    """The whole grid the runner would time (no --missing), over a copy nothing writes to."""
    assert perf_command.main([*(a for a in H200 if a != "--missing"), *extra]) == 0
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("would time ")]


def test_committed_h200_perf_file_covers_every_verified_claim_of_both_models(capsys):
    models = ["--models", "gemma4_31b,gemma4_e4b"]
    grid = {ln.split()[2] for ln in dry_run_all(capsys, *models)}
    assert grid, "the dry run listed no grid: the grid broke"
    lines = dry_run(capsys, *models)
    assert {ln.split()[2] for ln in lines} <= grid  # --missing filters the grid, never adds to it
    assert not [ln for ln in lines if ln.endswith("(absent)")]
    # what may remain is prefill entries timed before the host/plan fields existed, never a missing figure
    # (none at all once the data is complete)
    assert all(":prefill:" in ln and ln.endswith(("(no host_ms)", "(no plan_ms)")) for ln in lines)


def test_dry_run_names_a_bucket_the_file_lacks_and_writes_nothing(tmp_path, capsys):
    # libyaml's loader and dumper where PyYAML has them: the same data, the 0.85 MB file parsed in a tenth of the time
    data = yaml.load((PERF_DIR / "nvidia_h200.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    gone = "FLASH_ATTN_v3+upstream:fp8:d256:w512:decode:b1:c1024:h8x2:p128"
    del data["entries"][gone]
    out = tmp_path / "nvidia_h200.yaml"
    out.write_text(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    before = out.read_bytes()
    lines = dry_run(capsys, "--models", "gemma4_e4b", "--kernels", "FLASH_ATTN_v3+upstream", "--out", str(out))
    assert [ln for ln in lines if ln.endswith("(absent)")] == [f"would time {gone} (absent)"]
    assert out.read_bytes() == before


def test_dry_run_without_missing_lists_the_whole_grid(tmp_path, capsys):
    shutil.copy(PERF_DIR / "nvidia_h200.yaml", tmp_path / "p.yaml")
    argv = [a for a in H200 if a != "--missing"]
    assert perf_command.main([*argv, "--models", "gemma4_e4b", "--kernels", "FLASH_ATTN_v3+upstream", "--kv", "fp8",
                        "--decode", "1x512", "--prefill", "", "--out", str(tmp_path / "p.yaml")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("would time ")]
    # the sliding group (d256, window 512) at every page the objective reaches for it
    assert lines and all(ln.startswith("would time FLASH_ATTN_v3+upstream:fp8:d256:w512:decode:b1:c512:h8x2:p")
                         for ln in lines)
