"""Conformance and perf files name the kernel library versions they were measured with (kselect/measurement/measured_versions.py):
detection from metadata (absent packages absent, never a failure), which library each record ran, and the merge
into a file measured before, which keeps every version it named."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import sys

import pytest
import yaml

from kselect.commands import conformance as conformance_command
from kselect.measurement import measured_versions as mv
from kselect.commands import perf as perf_command
from kselect.measurement import perf as runner
from kselect.selector.evidence import perf_data as perf

HAVE = {"vllm_flash_attn": "vllm-0.34.0", "flash_attn_4": "4.0.0b36", "flashinfer": "0.7.3", "triton": "3.6.0"}


@pytest.mark.parametrize("backend, build, versions, libs", [
    ("FLASHINFER", "", {}, {"flashinfer": None}),
    ("FLASH_ATTN_v3", "vllm.vllm_flash_attn", {}, {"vllm_flash_attn": None}),
    ("FLASH_ATTN_v4", "vllm.vllm_flash_attn (FA4 fork)", {}, {"vllm_flash_attn": None}),
    ("FLASH_ATTN_v4", "flash-attn-4", {}, {"flash_attn_4": None}),
    ("FLASH_ATTN_v3+upstream", "flash_attn_3 (flash-attention hopper build)", {}, {"flash_attn_3": None}),
    ("TRITON_ATTN", "vllm 0.34.0 triton_unified_attention", {"vllm": "0.34.0"},
     {"triton": None, "vllm_triton": "vllm-0.34.0"}),
    ("TRITON_ATTN+kselect", "kselect kernels/triton_paged.py", {"kselect": "0.1"}, {"triton": None}),
    ("TRITON_FLASH_ATTN_v4", "vllm 0.33.0 triton_unified_attention + flash-attn-4", {"vllm": "0.33.0"},
     {"triton": None, "vllm_triton": "vllm-0.33.0", "flash_attn_4": None}),
    ("TRITON_FLASHINFER", "TRITON_ATTN + FLASHINFER", {}, {"triton": None, "flashinfer": None}),
    ("TORCH_REFERENCE", "", {}, {}),
])
def test_each_record_names_the_libraries_it_ran(backend, build, versions, libs):
    assert mv.libraries(backend, build, versions) == libs


def test_a_run_records_the_installed_version_of_what_it_ran_and_nothing_else():
    recs = [("FLASHINFER", "", {}), ("TRITON_ATTN", "vllm 0.34.0 triton_unified_attention", {"vllm": "0.34.0"})]
    assert mv.run_versions(recs, HAVE) == {"flashinfer": "0.7.3", "triton": "3.6.0", "vllm_triton": "vllm-0.34.0"}
    # a library that ran but whose version is not known here is said to be unrecorded, never guessed
    assert mv.run_versions([("FLASH_ATTN_v3", "vllm.vllm_flash_attn", {})], {}) == {"vllm_flash_attn": "unrecorded"}


def test_merge_keeps_what_the_file_named_and_joins_versions_that_now_coexist():
    old = {"vllm_flash_attn": "vllm-0.33.0", "flashinfer": "0.7.2.post1"}
    # this run measured only Triton: the file's other versions stay
    assert mv.merge(old, {"triton": "3.6.0"}, {"vllm_flash_attn", "flashinfer"}) == {
        "flashinfer": "0.7.2.post1", "triton": "3.6.0", "vllm_flash_attn": "vllm-0.33.0"}
    # every FlashInfer record was re-measured: the new version alone
    assert mv.merge(old, {"flashinfer": "0.7.3"}, {"vllm_flash_attn"})["flashinfer"] == "0.7.3"
    # some were not: both versions, so a release of either still warns
    assert mv.merge(old, {"flashinfer": "0.7.3"}, {"flashinfer"})["flashinfer"] == "0.7.2.post1 and 0.7.3"
    assert mv.merge({"flashinfer": "0.7.2.post1 and 0.7.3"}, {"flashinfer": "0.7.3"}, {"flashinfer"}) == {
        "flashinfer": "0.7.2.post1 and 0.7.3"}
    # kept records of a library the file never named: their version is unrecorded beside this run's
    assert mv.merge({}, {"triton": "3.6.0"}, {"triton"}) == {"triton": "3.6.0 and unrecorded"}
    # nothing known before or now: left out; an old version no kept record ran is not carried over as this run's
    assert mv.merge({}, {"flashinfer": "unrecorded"}, set()) == {}
    assert mv.merge({"flashinfer": "0.7.2.post1"}, {"flashinfer": "unrecorded"}, set()) == {}


def test_absent_packages_are_absent_and_never_fail(monkeypatch):
    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(mv.md, "version", missing)
    monkeypatch.setattr(mv, "vllm_flash_attn", lambda: None)
    assert mv.installed() == {}


def test_vllm_fa_build_is_read_from_the_install_scripts_stamp(tmp_path, monkeypatch):
    """kselect/measurement/builds/install_vllm_fa.sh puts vllm/vllm_flash_attn/ and KERNEL_VERSIONS in TARGET (on PYTHONPATH)."""
    (tmp_path / "vllm" / "vllm_flash_attn").mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    importlib.invalidate_caches()
    assert mv.vllm_flash_attn() is None  # no stamp, no vllm distribution: not recorded
    (tmp_path / "KERNEL_VERSIONS").write_text("vllm_flash_attn: vllm-0.34.0\n")
    assert mv.vllm_flash_attn() == "vllm-0.34.0"
    assert mv.installed()["vllm_flash_attn"] == "vllm-0.34.0"
    assert "vllm" not in sys.modules  # located, never imported


# ---------------------------------------------------------------- the writers


def test_conformance_writes_the_versions_of_what_it_ran_and_keeps_those_of_claims_it_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(mv, "installed", lambda: dict(HAVE))
    out = tmp_path / "conf.yaml"
    old = {"FLASHINFER:bf16:d256:causal": {"status": "verified", "rel_err": 0.002, "detail": "measured before"}}
    out.write_text(yaml.safe_dump({"gpu": "cpu_ci", "kernel_versions": {"vllm_flash_attn": "vllm-0.33.0",
                                                                        "flashinfer": "0.7.2.post1"},
                                   "claim_count": 1, "claims": old}))
    assert conformance_command.main(["--claims", "TORCH_REFERENCE:bf16:d64:window", "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["kernel_versions"] == {"flashinfer": "0.7.2.post1", "vllm_flash_attn": "vllm-0.33.0"}
    assert list(doc)[:4] == ["gpu", "torch", "measured", "kernel_versions"]  # where the committed files have it
    # a claim of another library, run now: its version joins; the kept FlashInfer claim keeps flashinfer's
    assert conformance_command.main(["--claims", "TRITON_ATTN:fp32:d64:page32", "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    release = doc["claims"]["TRITON_ATTN:fp32:d64:page32"]["versions"]["vllm"]
    assert doc["kernel_versions"] == {"flashinfer": "0.7.2.post1", "triton": "3.6.0",
                                      "vllm_flash_attn": "vllm-0.33.0", "vllm_triton": f"vllm-{release}"}


def test_conformance_on_this_machine_records_installed_triton(tmp_path):
    out = tmp_path / "conf.yaml"
    assert conformance_command.main(["--claims", "TRITON_ATTN:fp32:d64:page32", "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out)]) == 0
    kv = yaml.safe_load(out.read_text())["kernel_versions"]
    assert kv["triton"] == md.version("triton") and kv["vllm_triton"].startswith("vllm-")


def _entry(kernel, build, versions, context=32):
    return perf.PerfEntry(kernel=kernel, build=build, versions=versions, kv="bf16", head=256, window=None,
                          phase="decode", batch=1, context=context, num_q_heads=8, num_kv_heads=4, page=16, ms=0.1,
                          graph=False, gpu="fake", date="d")


def test_perf_versions_follow_the_timed_entries_and_keep_the_kept_ones():
    fi_old, fi_new, fa = (_entry("FLASHINFER", "FLASHINFER", {}), _entry("FLASHINFER", "FLASHINFER", {}, 64),
                          _entry("FLASH_ATTN_v3", "vllm.vllm_flash_attn", {}))
    before = perf.PerfFile(gpu="fake", kernel_versions={"flashinfer": "0.7.2.post1", "vllm_flash_attn": "vllm-0.33.0"},
                           entries={fi_old.bucket: fi_old, fa.bucket: fa})
    # FA re-timed with 0.34.0's build, FlashInfer only at a new bucket: the old FlashInfer figure stays, with its version
    kv = runner.kernel_versions(before, {fa.bucket: fa, fi_new.bucket: fi_new}, HAVE)
    assert kv == {"flashinfer": "0.7.2.post1 and 0.7.3", "vllm_flash_attn": "vllm-0.34.0"}
    assert runner.kernel_versions(None, {fa.bucket: fa}, HAVE) == {"vllm_flash_attn": "vllm-0.34.0"}


def test_a_perf_run_keeps_the_files_versions(tmp_path):
    claims = {"TORCH_REFERENCE:bf16:d64:window": {"status": "verified"},
              "TORCH_REFERENCE:bf16:d128:causal": {"status": "verified"}}
    conf = tmp_path / "fake.yaml"
    conf.write_text(yaml.safe_dump({"gpu": "fake", "claim_count": len(claims), "claims": claims}))
    out = tmp_path / "perf" / "fake.yaml"
    out.parent.mkdir()
    out.write_text(yaml.safe_dump({"gpu": "fake", "kernel_versions": {"flashinfer": "0.7.2.post1"}}))
    assert perf_command.main(["--gpu-name", "fake", "--conformance", str(conf), "--out", str(out), "--models", "gemma4_tiny",
                        "--device", "cpu", "--reps", "1", "--decode", "1x32", "--prefill", ""]) == 0
    data = perf.load("fake", out.parent)
    assert len(data.entries) == 2 and data.kernel_versions == {"flashinfer": "0.7.2.post1"}
