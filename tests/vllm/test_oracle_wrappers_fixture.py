"""kselect's `rules=vllm_0_34_0` against a slice of the wrappers grid: vLLM 0.34.0's own chain over the multimodal
wrappers of the architecture table (Gemma-3, Qwen2-VL, Qwen2.5-VL, LLaVA, LLaVA-NeXT(-Video), LLaVA-OneVision,
Mistral-3), each from its config class's
defaults and from the published-shaped configs of kselect/oracle/wrapper_configs.json, with images (--mm 1: the
vision tower built, Gemma-3's mm-prefix mask) and without (--language-model-only). The configs travel beside the
fixture. Made (and refreshed after a newer record) with

    python -m kselect.measurement.vllm.make_registry_fixture bench/results/vllm/oracle_wrappers_0_34_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_34_0_wrappers_sample.jsonl --per-arch 10 --auto-cc 8.0 9.0 10.0
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kselect.oracle.cells import Cell
from kselect.oracle.compare import classes, compare, kselect_records, load_records, where
from kselect.oracle.registry import configs_path, load_configs
from kselect.selector.config.hf_arch import derive_layers

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_34_0_wrappers_sample.jsonl"
RECORDS = load_records(FIXTURE)
CONFIGS = load_configs(configs_path(FIXTURE))["configs"]


@pytest.fixture(scope="module")
def kselect():
    return kselect_records([Cell.from_dict(r["cell"]) for r in RECORDS], "vllm_0_34_0", None, CONFIGS)


def test_fixture_covers_every_wrapper_with_and_without_images():
    wrappers = {c["architectures"][0] for c in CONFIGS.values()}
    assert wrappers == {"Gemma3ForConditionalGeneration", "Qwen2VLForConditionalGeneration",
                        "Qwen2_5_VLForConditionalGeneration", "LlavaForConditionalGeneration",
                        "LlavaNextForConditionalGeneration", "LlavaNextVideoForConditionalGeneration",
                        "LlavaOnevisionForConditionalGeneration", "Mistral3ForConditionalGeneration"}
    assert {r["cell"]["multimodal"] for r in RECORDS} == {True, False}
    assert any(r["error"] for r in RECORDS) and any(not r["error"] for r in RECORDS)
    # gemma3_mm.py's mm-prefix mask reached vLLM's selector: on SM90 no plain FLASH_ATTN (which serves no mm-prefix
    # mask), the composite first for head 256 (priority-cuda_sm90_mm_prefix), TRITON_ATTN for gemma-3-27b-it's 128
    gemma_mm = [r for r in RECORDS if r["cell"]["multimodal"] and r["cell"]["cc"] == "9.0" and r["cell"]["backend"] == "auto"
                and CONFIGS[r["cell"]["model"]]["architectures"] == ["Gemma3ForConditionalGeneration"]]
    backends = {g["backend"] for r in gemma_mm for g in r["groups"].values()}
    assert "TRITON_FLASH_ATTN" in backends and "FLASH_ATTN" not in backends, backends


def test_every_field_agrees(kselect):
    rep = compare(RECORDS, rules="vllm_0_34_0", kselect=kselect)
    msg = "\n".join(f"{len(ds)} x {f}: {cause}\n    where {where(ds)}" for f, cause, ds in classes(rep)[:12])
    assert not rep.disagreements, f"{len(rep.disagreements)} disagreements:\n{msg}"


def test_the_layer_groups_are_vllms(kselect):
    # the language model's layers, as vLLM's KV-cache groups hold them (the vision tower adds none)
    for r in RECORDS:
        if r["error"]:
            continue
        mine: dict[str, list[int]] = {}
        for x in derive_layers(CONFIGS[r["cell"]["model"]])[2]:
            mine.setdefault(x.kind, []).append(x.index)
        assert mine == {g: sorted(v["layers"]) for g, v in r["groups"].items()}, r["key"]
        assert set(kselect[r["key"]]["groups"]) == set(r["groups"]), r["key"]


def test_no_cell_selects_where_vllm_refuses(kselect):
    bad = [r["key"] for r in RECORDS if r["error"] and not kselect[r["key"]]["error"]]
    assert not bad, bad[:5]
