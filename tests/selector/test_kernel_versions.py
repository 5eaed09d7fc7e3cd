"""The objective warns where it ranks a figure measured on another kernel library version than the release the
rules model (selector/evidence/kernel_versions.py): vLLM's Triton kernel timed from another release's source."""

from __future__ import annotations

import pytest

from kselect.selector.api import Evidence, compose, resolve
from kselect.selector.evidence.kernel_versions import other_versions, release_of

from perf_fakes import GPU, entry, write_conformance, write_perf


FAKE: dict = {}  # the fake GPU's folder (conformance/, perf/): the evidence passed to resolve


def test_release_of_a_ruleset():
    assert release_of("vllm_0_33_0") == "0.33.0" and release_of("vllm_0_34_0") == "0.34.0"
    assert release_of("post_pr52987") is None  # vLLM main after a PR: no release to compare with


def test_other_versions():
    assert other_versions("TRITON_ATTN", {"vllm": "0.33.0", "triton": "3.6.0"}, "0.33.0") == ""
    assert other_versions("TRITON_ATTN", {"vllm": "0.34.0"}, "0.33.0") == "vllm 0.34.0 (release 0.33.0)"
    assert other_versions("TRITON_ATTN", {"triton": "3.6.0"}, "0.33.0") == "vllm unrecorded (release 0.33.0)"
    assert other_versions("TRITON_ATTN", {"vllm": "0.34.0"}, None) == ""
    assert other_versions("TRITON_ATTN+kselect", {"kselect": "0.1.0"}, "0.33.0") == ""  # not vLLM's kernel


def _versioned(e, vllm):
    return e.model_copy(update={"versions": {**e.versions, "vllm": vllm}}) if e.kernel == "TRITON_ATTN" else e


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    cdir, pdir = tmp_path / "conformance", tmp_path / "perf"
    cdir.mkdir()
    pdir.mkdir()
    write_conformance(cdir, unverified=())

    def make(vllm):
        write_perf(pdir, [_versioned(e, vllm) for e in (
            entry("FLASH_ATTN_v4", 256, "decode", 0.10), entry("FLASHINFER", 256, "decode", 0.09),
            entry("TRITON_ATTN", 256, "decode", 0.05), entry("FLASH_ATTN_v4", 512, "decode", 0.3),
            entry("FLASHINFER", 512, "decode", 0.25), entry("TRITON_ATTN", 512, "decode", 0.2),
            entry("FLASH_ATTN_v4", 256, "prefill", 0.5), entry("FLASHINFER", 256, "prefill", 0.9),
            entry("TRITON_ATTN", 256, "prefill", 1.0), entry("FLASHINFER", 512, "prefill", 2.0),
            entry("FLASH_ATTN_v4", 512, "prefill", 1.9), entry("TRITON_ATTN", 512, "prefill", 1.0))])

    FAKE['dir'] = tmp_path
    yield make
    FAKE.clear()


def _warnings():
    cfg = compose(["rules=vllm_0_33_0", "platform=sm90", f"platform.gpu_model={GPU}", "model=gemma4_31b",
                   "objective=latency"])
    sel = resolve(cfg, Evidence.load(FAKE['dir']))
    return sel, [w for g in sel.groups for w in g.warnings if w.code == "objective_other_version"]


def test_objective_warns_on_figures_of_another_release(fake_gpu):
    fake_gpu("0.34.0")
    sel, warns = _warnings()
    assert sel.group("sliding_window").label == "TRITON_ATTN"  # ranked and chosen: the warning matters
    assert {(w.group, w.phase, w.backend) for w in warns} >= {("sliding_window", "decode", "TRITON_ATTN")}
    w = next(w for w in warns if (w.group, w.phase) == ("sliding_window", "decode"))
    assert w.text.startswith("objective latency: the decode figure of TRITON_ATTN ranked here was measured on vllm "
                             "0.34.0 (release 0.33.0) [TRITON_ATTN:bf16:d256:w1024:decode:")
    assert "not vLLM 0.33.0's kernel" in w.text


def test_no_warning_on_the_releases_own_figures(fake_gpu):
    fake_gpu("0.33.0")
    sel, warns = _warnings()
    assert sel.group("sliding_window").label == "TRITON_ATTN" and warns == []
