"""kselect's `rules=vllm_0_34_0` against a slice of the registry grid (#47): vLLM 0.34.0's own chain over every
text-generation architecture of its registry whose config class ships with transformers, each from the class's
defaults (kselect/oracle/registry_configs.py; the configs travel beside the fixture).

Per cell, what kselect selects for the config is compared with vLLM's record, field by field; an architecture of
kselect's table (conf/architectures/vllm_0_34_0.yaml) agrees on every field, any other is refused by name, and no
cell selects where vLLM refuses. Made (and refreshed after a newer record) with

    python -m kselect.measurement.vllm.make_registry_fixture bench/results/vllm/oracle_registry_0_34_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_34_0_registry_sample.jsonl
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kselect.oracle.cells import Cell
from kselect.oracle.compare import classes, compare, kselect_records, load_records, where
from kselect.oracle.registry import configs_path, load_configs
from kselect.oracle.registry_report import BUILD_STAGES, REFUSED_BY_NAME
from kselect.selector.config.hf_table import table

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_34_0_registry_sample.jsonl"
RECORDS = load_records(FIXTURE)
CONFIGS = load_configs(configs_path(FIXTURE))["configs"]
MODELLED = set(table().architectures)


def _buildable(arch: str) -> bool:
    """vLLM built the architecture in some cell (else the oracle could not build it on CPU: counted in neither figure)."""
    return any(not (r["error"] and r["error"]["stage"] in BUILD_STAGES) for r in RECORDS if r["cell"]["model"] == arch)


@pytest.fixture(scope="module")
def kselect():
    return kselect_records([Cell.from_dict(r["cell"]) for r in RECORDS], "vllm_0_34_0", None, CONFIGS)


def test_fixture_covers_the_registry():
    archs = {r["cell"]["model"] for r in RECORDS}
    assert len(archs) >= 40 and archs <= set(CONFIGS)
    assert len(archs & MODELLED) >= 30
    assert any(r["error"] for r in RECORDS) and any(not r["error"] for r in RECORDS)
    assert any(r["cell"]["backend"] != "auto" for r in RECORDS)
    kinds = {g for r in RECORDS for g in r["groups"]}
    assert {"full_attention", "sliding_window", "mla", "mamba"} <= kinds


def test_modelled_architectures_agree_on_every_field(kselect):
    recs = [r for r in RECORDS if r["cell"]["model"] in MODELLED and _buildable(r["cell"]["model"])]
    rep = compare(recs, rules="vllm_0_34_0", kselect=kselect)
    msg = "\n".join(f"{len(ds)} x {f}: {cause}\n    where {where(ds)}" for f, cause, ds in classes(rep)[:12])
    assert not rep.disagreements, f"{len(rep.disagreements)} disagreements:\n{msg}"


def test_other_architectures_are_refused_by_name(kselect):
    for r in RECORDS:
        if r["cell"]["model"] not in MODELLED:
            assert REFUSED_BY_NAME in (kselect[r["key"]]["error"] or ""), r["key"]


def test_no_cell_selects_where_vllm_refuses(kselect):
    bad = [r["key"] for r in RECORDS if r["error"] and _buildable(r["cell"]["model"]) and not kselect[r["key"]]["error"]]
    assert not bad, bad[:5]
