"""Issue #42: a model's layers as vLLM 0.34.0 builds them. For every non-Gemma preset, the layers kselect derives from
the published config.json (selector/config/hf_arch.py) fall into the same KV-cache groups, layer for layer, as the
ones vLLM's own model classes registered in the oracle's record (kselect oracle --grid models, on the meta device)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kselect.selector.api import compose
from kselect.selector.rules.groups import target_groups

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench/results/vllm/oracle_models_0_34_0.jsonl.gz"


def _vllm_layers() -> dict[str, dict[str, list[int]]]:
    """model -> group kind -> layer indices, from the first cell of each model where vLLM built every layer."""
    out: dict[str, dict[str, list[int]]] = {}
    with gzip.open(RECORD, "rt") as f:
        for line in f:
            r = json.loads(line)
            model = r["key"].split("|")[1].removeprefix("model=")
            if model not in out and r.get("groups") and not r.get("error"):
                out[model] = {k: sorted(g["layers"]) for k, g in r["groups"].items()}
    return out


VLLM = _vllm_layers()


@pytest.mark.parametrize("model", sorted(VLLM))
def test_layer_groups_match_vllms_model_classes(model):
    cfg = compose(["platform=sm90", f"model={model}"])
    mine = {g.kind: sorted(g.layers) for g in target_groups(cfg)}
    assert mine == VLLM[model]


def test_every_family_is_in_the_record():
    kinds = {k for groups in VLLM.values() for k in groups}
    assert {"full_attention", "sliding_window", "chunked_local", "mla", "mla_indexer", "mamba"} <= kinds, kinds
    assert len(VLLM) >= 12


@pytest.mark.parametrize("preset", ["llama3_1_8b", "nemotron_h_8b"])
def test_a_config_json_given_by_path_selects_as_its_preset(preset, tmp_path):
    # model=hf model.hf_config=<folder>: the published config.json on disk selects exactly as the preset holding it
    import yaml

    hf = yaml.safe_load((ROOT / "conf" / "model" / f"{preset}.yaml").read_text())["hf_config"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    from kselect.selector.api import resolve

    by_path = resolve(compose(["platform=sm90", "model=hf", f"model.hf_config={tmp_path}"]))
    by_preset = resolve(compose(["platform=sm90", f"model={preset}"]))
    assert by_path.environment["model"] == tmp_path.name
    fields = ("kind", "layers", "backend", "flash_attn_version", "kernel_block_size", "kv_block_size", "head_size")
    assert [[getattr(g, f) for f in fields] for g in by_path.groups] == \
           [[getattr(g, f) for f in fields] for g in by_preset.groups]
    assert by_path.block_size == by_preset.block_size
