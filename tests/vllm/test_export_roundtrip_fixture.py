"""The export round trip (#47) on a committed slice: per model of the registry grid and the quantized presets, one
`output=vllm` command that vLLM 0.34.0's own `vllm serve` parser, EngineArgs and selection chain accepted
(kselect/measurement/vllm/export_roundtrip.py; the full records are bench/results/vllm/export_*_vllm_0_34_0.*).

vLLM is not run here: the test checks that kselect still exports, for each cell, the very tokens vLLM was given and
the groups it selected then (else the recorded answer is stale: re-run the round trip), and that vLLM's groups are
kselect's, field by field. Made with

    python -m kselect.measurement.vllm.make_export_fixture bench/results/vllm/export_registry_vllm_0_34_0.jsonl.gz \
        bench/results/vllm/export_quantized_vllm_0_34_0.jsonl.gz --out tests/vllm/fixtures/vllm_0_34_0_export_sample.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kselect.oracle.cells import Cell
from kselect.oracle.compare import same_field
from kselect.oracle.export import command_tokens, kselect_exports
from kselect.oracle.registry import load_configs
from kselect.selector.config.hf_table import table

FIXTURES = Path(__file__).parent / "fixtures"
ITEMS = [json.loads(line) for line in (FIXTURES / "vllm_0_34_0_export_sample.jsonl").read_text().splitlines()]
CONFIGS = load_configs(FIXTURES / "vllm_0_34_0_registry_sample.configs.json")["configs"]
QUANTIZED = {"llama3_1_8b_fp8_modelopt", "llama3_1_8b_fp8_kv_ct", "qwen2_5_7b_awq"}


@pytest.fixture(scope="module")
def exports():
    cells = [Cell.from_dict(it["cell"]) for it in ITEMS]
    return kselect_exports(cells, "vllm_0_34_0", None, CONFIGS)


def test_the_slice_covers_every_modelled_architecture_and_the_quantized_presets():
    models = {it["cell"]["model"] for it in ITEMS}
    assert QUANTIZED <= models
    registry = models & set(CONFIGS)
    # the round trip ran every architecture kselect's table accepts that vLLM builds on CPU
    assert len(registry) >= 60 and registry <= set(table().architectures)


@pytest.mark.parametrize("i", range(len(ITEMS)), ids=[it["cell"]["model"] for it in ITEMS])
def test_kselect_exports_what_vllm_reproduced(exports, i):
    it = ITEMS[i]
    key = Cell.from_dict(it["cell"]).key
    got = exports.get(key)
    assert got is not None and got["command"], f"{key}: kselect no longer exports a command"
    assert command_tokens(got["command"]) == it["tokens"], f"{key}: the exported command changed"
    assert got["groups"] == it["kselect"], f"{key}: kselect's selection changed"
    assert set(it["vllm"]) == set(got["groups"]), key
    for g, vg in it["vllm"].items():
        for f in ("backend", "fa_version", "kernel_block"):
            assert same_field(f, vg, got["groups"][g]), f"{key} {g}.{f}: vLLM {vg[f]!r}, kselect {got['groups'][g][f]!r}"
