"""kselect's `rules=vllm_0_34_0` for non-Gemma models (#42) against vLLM 0.34.0's own selections.

Each cell of the fixture is one oracle record: vLLM 0.34.0's chain (kselect/oracle/vllm_chain.py: EngineArgs,
the model's layers on the meta device, get_attn_backend per layer, the KV-cache groups and metadata builders) for a
model preset x compute capability x --kv-cache-dtype x --attention-config backend pin. Per family a few cells: the
auto choice per capability, FP8 caches, pins vLLM accepts and pins it refuses. What kselect selects for the cell is
compared with the record, field by field (backend, FA version, kernel block, KV block, quant-query, and whether
vLLM refuses), never with hard-coded expectations.

The fixture (tests/vllm/fixtures/vllm_0_34_0_models_sample.jsonl) is a slice of the committed models-grid record,
made (and refreshed after a newer record) with

    python -m kselect.measurement.vllm.make_fixture bench/results/vllm/oracle_models_0_34_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_34_0_models_sample.jsonl \
        --keys-from tests/vllm/fixtures/vllm_0_34_0_models_sample.jsonl --total 0

(first made with --keys-from a hand-picked list of 62 keys: each family's auto choice on each capability, FP8
caches, pins vLLM accepts and pins it refuses).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kselect.oracle.cells import GROUP_FIELDS, Cell
from kselect.oracle.compare import kselect_records, load_records, same_field

FIXTURE = Path(__file__).parents[1] / "vllm" / "fixtures" / "vllm_0_34_0_models_sample.jsonl"
RULES = "vllm_0_34_0"
FAMILY = {
    "llama3_1_8b": "dense", "qwen3_8b": "dense", "mistral_7b_v0_3": "dense",
    "gemma3_1b": "sliding", "gpt_oss_20b": "sinks", "gpt_oss_120b": "sinks",
    "deepseek_v3": "mla", "kimi_k2": "mla", "deepseek_v3_2": "mla_sparse",
    "qwen3_next_80b_a3b": "hybrid", "nemotron_h_8b": "hybrid", "jamba_mini_1_7": "hybrid",
    "llama4_scout": "chunked_local",
    "llama3_1_8b_fp8_modelopt": "quantized", "llama3_1_8b_fp8_kv_ct": "quantized", "qwen2_5_7b_awq": "quantized",
}

RECORDS = load_records(FIXTURE)


@pytest.fixture(scope="module")
def kselect():
    return kselect_records([Cell.from_dict(r["cell"]) for r in RECORDS], rules=RULES)


def test_fixture_covers_every_family_and_capability():
    assert 40 <= len(RECORDS) <= 200
    fams = {FAMILY[r["cell"]["model"]] for r in RECORDS}
    assert fams == set(FAMILY.values())
    assert {r["cell"]["cc"] for r in RECORDS} == {"8.0", "8.9", "9.0", "10.0", "12.0"}
    assert any(r["error"] for r in RECORDS) and any(not r["error"] for r in RECORDS)
    assert any(r["cell"]["backend"] != "auto" for r in RECORDS)
    # per family: an auto cell and a pinned or failing one
    for fam in set(FAMILY.values()):
        mine = [r for r in RECORDS if FAMILY[r["cell"]["model"]] == fam]
        assert any(r["cell"]["backend"] == "auto" and not r["error"] for r in mine), fam
        assert len(mine) >= 3, fam
    groups = [g for r in RECORDS for g in r["groups"].values()]
    # the rules this module guards: an MLA backend's forced block, the sparse and SM12x lists, sinks refusals
    assert any(g["backend"] == "CUTLASS_MLA" and g["kv_block"] == 128 for g in groups)
    assert {"FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120", "TRITON_MLA"} <= {g["backend"] for g in groups}
    assert any(r["error"] and r["cell"]["model"].startswith("gpt_oss") for r in RECORDS)


@pytest.mark.parametrize("rec", RECORDS, ids=[r["key"] for r in RECORDS])
def test_kselect_selects_what_vllm_does(kselect, rec):
    k = kselect[rec["key"]]
    assert bool(k["error"]) == bool(rec["error"]), (
        f"vLLM {'refuses: ' + rec['error']['message'][:200] if rec['error'] else 'selects'}; "
        f"kselect {'refuses: ' + k['error'] if k['error'] else 'selects'}")
    if rec["error"]:
        return
    bad = []
    for gname, vg in sorted(rec["groups"].items()):
        kg = k["groups"].get(gname)
        assert kg is not None, f"kselect has no {gname} group (it has {sorted(k['groups'])})"
        for f in GROUP_FIELDS:
            if not same_field(f, vg, kg):
                bad.append(f"{gname}.{f}: vLLM {vg.get(f)!r} vs kselect {kg.get(f)!r}")
    assert not bad, "; ".join(bad)


CACHE_DTYPED = [r for r in RECORDS if "cache_dtype" in r]


def test_the_quantized_presets_resolve_auto_as_vllm_does():
    """Quantized checkpoints (#47): vLLM's own chain resolved `auto` to the checkpoint's FP8 cache for the ModelOpt
    and compressed-tensors presets and kept it for the AWQ one, in every recorded cell."""
    auto = {r["cell"]["model"]: r["cache_dtype"] for r in CACHE_DTYPED if r["cell"]["kv_cache"] == "auto"}
    assert auto == {"llama3_1_8b_fp8_modelopt": "fp8_e4m3", "llama3_1_8b_fp8_kv_ct": "fp8", "qwen2_5_7b_awq": "auto"}


def test_kselect_takes_the_kv_dtype_vllms_engine_took():
    """The KV dtype kselect's rules see (fact kv.dtype: the checkpoint's for auto) is the engine's cache_dtype."""
    from dataclasses import replace

    from kselect.oracle.compare import _matrix_cell
    from kselect.selector.api import CONF_DIR, Builder
    from kselect.selector.rules.facts import kv_dtype_setting

    cells = [replace(_matrix_cell(Cell.from_dict(r["cell"])), rules=RULES) for r in CACHE_DTYPED]
    got = [kv_dtype_setting(cfg) for _, cfg in Builder(CONF_DIR).configs(cells)]
    assert len(got) == len(CACHE_DTYPED) >= 20
    assert got == [r["cache_dtype"] for r in CACHE_DTYPED]
