"""Warnings a reviewer must see, in every output format and in diffs:
MTP drafts keeping unit scales on a calibrated FP8 target (`mtp-unit_scales_on_calibrated_fp8`),
a user block size that excluded a higher-priority backend, and unverified / refuted hardware
claims (`[conformance]`)."""

from __future__ import annotations

import functools
import json

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from kselect.selector.api import CONF_DIR, compose
from kselect.selector.review.diff import diff_results, render as render_diff
from kselect.selector.review.diff_render import detail
from kselect.selector.review.gather import markdown as gather_markdown
from kselect.selector.review.gather import table as gather_table
from kselect.selector.review.matrix import MatrixSpec, expand, resolve_cells
from kselect.selector.export.formats import render
from kselect.selector.api import Evidence, resolve
from kselect.selector.review.sweep import run_job

SM90 = ["rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8"]  # the seed story's rules
MTP_UNIT = "mtp-unit_scales_on_calibrated_fp8"
BLOCK = "kv_cache.block_size=16 precluded higher-priority backend(s) ['FLASH_ATTN']"
# (a text-only FP8 Gemma-4 on SM90 takes FlashInfer, whose SM90 builder refuses sliding-window layers, and an unpinned
# drafter does too: the cases pin TRITON_ATTN, which the drafter inherits, or run multimodal)
CASES = {
    "mtp": (SM90 + ["kv_cache.scales=calibrated", "spec_decode=mtp", "attention.backend=TRITON_ATTN"], MTP_UNIT),
    "block": (SM90 + ["model.multimodal=true", "kv_cache.block_size=16", "overlay=[pr48666]"], BLOCK),
    # sm100 has no measured conformance data (gpu_model null): every claim is unverified
    "unverified": (["rules=post_pr52987", "platform=sm100", "model=gemma4_31b", "kv_cache=fp8"], "unverified on sm100: FLASHINFER:fp8:d512:causal"),
}


@functools.lru_cache(maxsize=None)
def _config(case: str):
    return compose(CASES[case][0])


@functools.lru_cache(maxsize=None)
def _selection(case: str):
    return resolve(_config(case))


@pytest.mark.parametrize("fmt", ["table", "json", "markdown", "vllm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_selection_formats_show_the_warning(case, fmt):
    needle = CASES[case][1]
    text = render(_selection(case), fmt, cfg=_config(case))
    if fmt == "table" and case == "unverified":  # a note: one summary line, in full under verbose=true
        assert "note: claims of the selected kernels unverified on sm100 (2 groups)" in text and needle not in text
        text = render(_selection(case), fmt, True, cfg=_config(case))
    if fmt == "json":
        text = json.dumps([w for g in json.loads(text)["groups"] for w in g["warnings"]])
    assert needle in text


REFUTED_GPU = "fake_h200"


@pytest.fixture
def refuted_gpu(fake_conformance) -> Evidence:
    """The evidence of a measured GPU (REFUTED_GPU) on which FA4 FP8 at head 512 failed."""
    return fake_conformance(
        REFUTED_GPU,
        "  FLASH_ATTN_v4:fp8:d512:causal: {status: refuted, rel_err: 0.31, detail: garbage tokens}\n"
        "  FLASH_ATTN_v4:fp8:d256:causal: {status: verified, rel_err: 0.002}\n",
    )


def test_refuted_claims_in_every_format(refuted_gpu):
    sel = resolve(compose(SM90 + ["overlay=[pr48666]", f"platform.gpu_model={REFUTED_GPU}"]), refuted_gpu)
    full = sel.group("full_attention")
    assert {c.claim: c.status for c in full.claims}["FLASH_ATTN_v4:fp8:d512:causal"] == "refuted"
    for fmt in ("table", "json", "markdown"):
        assert "REFUTED on fake_h200: FLASH_ATTN_v4:fp8:d512:causal (refuted, rel err 0.31, garbage tokens)" in render(sel, fmt)
    # vLLM 0.33.0 runs the same FA4 FP8 path at head 512 (its own rules, no overlay): the export warns too
    cfg = compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", f"platform.gpu_model={REFUTED_GPU}"])
    assert "REFUTED on fake_h200: FLASH_ATTN_v4:fp8:d512:causal" in render(resolve(cfg, refuted_gpu), "vllm", cfg=cfg)


def _matrix(pins=None, multimodal=(False,)) -> MatrixSpec:
    return MatrixSpec(
        name="w",
        rules="post_pr52987",
        axes={"platform": ["sm90"], "model": ["gemma4_31b"], "kv_cache": ["fp8"], "scales": ["unit", "calibrated"],
              "spec_decode": ["none", "mtp"], "multimodal": list(multimodal)},  # fmt: skip
        pins=pins or {"auto": {}, "bs16": {"kv_cache.block_size": 16}},
    )


def _diff(spec, a, b, evidence=None):
    return diff_results(spec, resolve_cells(expand(spec, a), evidence=evidence), resolve_cells(expand(spec, b), evidence=evidence),
                        str(list(a)), str(list(b)))


@functools.lru_cache(maxsize=None)
def _fwd_back():
    # #48666: the user block size now excludes FA (kernel block [64]) from the multimodal FP8 cells; the revert brings
    # back the MTP bug (shown with TRITON_ATTN pinned, which the drafter inherits: unpinned, a text-only FP8 drafter
    # takes FlashInfer, whose SM90 builder refuses its sliding-window layers)
    fwd = _diff(_matrix(multimodal=(True,)), (), ("pr48666",))
    triton = _matrix({"triton": {"attention.backend": "TRITON_ATTN"}})
    return fwd, _diff(triton, ("pr48666",), ("pr48666", "pr52987"))


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_diffs_show_new_warnings_first(fmt):
    fwd, back = (render_diff(d, fmt) for d in _fwd_back())
    assert BLOCK in fwd and "on nvidia_h200: hardware claims of the selected kernels [conformance]" in fwd
    assert MTP_UNIT in back
    if fmt == "json":
        blocks = json.loads(back)["blocks"]
        mtp = next(b for b in blocks if MTP_UNIT in b["title"])
        assert mtp["kind"] == "new_warning" and mtp["cells"] == ["sm90-gemma4_31b-fp8-calib-mtp-triton"]
        kinds = [b["kind"] for b in blocks]
        assert kinds.index("new_warning") < kinds.index("selection")
    else:
        assert fwd.index(BLOCK) < fwd.index("TRITON_ATTN -> FLASH_ATTN v4")


def test_refuted_claims_lead_the_warnings_of_a_diff(refuted_gpu):
    spec = _matrix({"auto": {"platform.gpu_model": REFUTED_GPU}})
    d = _diff(spec, (), ("pr48666",), refuted_gpu)
    warn = [b for b in d.blocks if b.kind == "new_warning"]
    assert warn[0].key == ("claims_refuted", REFUTED_GPU)
    first = warn[0].details[0][0]
    assert (first.group, [c.claim for c in first.claims]) == ("full_attention", ["FLASH_ATTN_v4:fp8:d512:causal"])
    assert warn[0].title == f"REFUTED on {REFUTED_GPU}: hardware claims of the selected kernels [conformance]"
    assert detail(first).startswith("full_attention: FLASH_ATTN_v4:fp8:d512:causal (refuted, rel err 0.31")
    assert "REFUTED on fake_h200" in render_diff(d, "markdown")


def test_sweep_jobs_and_gather_show_warnings(tmp_path):
    overrides = CASES["mtp"][0]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    rec = run_job(cfg, overrides)
    rec["job"] = {"num": 0}
    rec["_dir"] = "0"
    assert any(w["rule"] == MTP_UNIT and w["code"] == "rule" for g in rec["selection"]["groups"] for w in g["warnings"])
    assert MTP_UNIT in gather_table(tmp_path, [rec]) and MTP_UNIT in gather_markdown(tmp_path, [rec])
