"""The registry grid's plumbing (#47), without vLLM: the cells per architecture, the configs made from transformers'
classes (shrunk with their layer pattern), and the CLI's refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kselect.oracle import registry
from kselect.oracle.cells import ATTENTION_BACKENDS, MLA_BACKENDS, SPARSE_MLA_BACKENDS

HERE = Path(registry.__file__).resolve().parent


def test_cells_take_the_family_pins():
    cfgs = {"A": {"num_hidden_layers": 2}, "M": {"kv_lora_rank": 512}, "S": {"text_config": {"kv_lora_rank": 512,
                                                                                          "index_topk": 2048}}}
    cells = registry.registry_grid(cfgs)
    per = {m: {c.backend for c in cells if c.model == m} for m in cfgs}
    assert per == {"A": {"auto", *ATTENTION_BACKENDS}, "M": {"auto", *MLA_BACKENDS},
                   "S": {"auto", *SPARSE_MLA_BACKENDS}}
    assert len(cells) == 5 * 2 * (4 + 6 + 4)
    assert len({c.key for c in cells}) == len(cells)
    assert registry.registry_grid(cfgs, ccs=["9.0"], models=["A"], backends=["auto"])[0].key.startswith("cc=9.0|model=A|")


def test_configs_travel_beside_the_record():
    assert registry.configs_path(Path("x/oracle_registry_0_34_0.jsonl.gz")) == Path("x/oracle_registry_0_34_0.configs.json")
    assert registry.configs_path(Path("s.jsonl"), "summary") == Path("s.summary.json")


def test_a_config_is_shrunk_keeping_its_layer_pattern():
    pytest.importorskip("transformers")
    sys.path.insert(0, str(HERE))
    try:
        import registry_configs as rc
    finally:
        sys.path.remove(str(HERE))
    from transformers import Gemma3TextConfig

    d = rc.shrunk(Gemma3TextConfig, "Gemma3ForCausalLM")
    assert d["num_hidden_layers"] == rc.SHRUNK_LAYERS and d["architectures"] == ["Gemma3ForCausalLM"]
    assert d["layer_types"][5] == "full_attention" and d["layer_types"].count("full_attention") == 1
    assert d["dtype"] == "bfloat16"
    assert "Gemma2ForCausalLM" in rc.registry_architectures(str(_src_with_registry()))


def _src_with_registry() -> Path:
    """A source tree holding only a registry.py with a `_TEXT_GENERATION_MODELS` literal."""
    import tempfile

    root = Path(tempfile.mkdtemp())
    p = root / "vllm/model_executor/models/registry.py"
    p.parent.mkdir(parents=True)
    p.write_text('_TEXT_GENERATION_MODELS = {\n    "Gemma2ForCausalLM": ("gemma2", "Gemma2ForCausalLM"),\n}\n')
    return root


def test_dry_run_without_configs_exits_2(tmp_path, capsys, monkeypatch):
    from kselect.commands import oracle as cli
    from kselect.oracle import env

    monkeypatch.setattr(env, "resolve", lambda source, *a, **k: env.Release("0.34.0", None, tmp_path))
    rc = cli.main(["0.34.0", "--grid", "registry", "--dry-run", "--out", str(tmp_path / "r.jsonl.gz")])
    assert rc == 2
    assert "r.configs.json is not made yet" in capsys.readouterr().err


def test_dry_run_with_configs_plans_the_cells(tmp_path, capsys, monkeypatch):
    from kselect.commands import oracle as cli
    from kselect.oracle import env

    monkeypatch.setattr(env, "resolve", lambda source, *a, **k: env.Release("0.34.0", None, tmp_path))
    (tmp_path / "r.configs.json").write_text(json.dumps({"configs": {"LlamaForCausalLM": {}}}))
    rc = cli.main(["0.34.0", "--grid", "registry", "--dry-run", "--out", str(tmp_path / "r.jsonl.gz"), "--cc", "9.0"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["cells"] == 2 * 4


def test_the_wrappers_grid_plans_cells_with_and_without_images(tmp_path, capsys, monkeypatch):
    from kselect.commands import oracle as cli
    from kselect.oracle import env

    monkeypatch.setattr(env, "resolve", lambda source, *a, **k: env.Release("0.34.0", None, tmp_path))
    (tmp_path / "w.configs.json").write_text(json.dumps({"configs": {"Gemma3ForConditionalGeneration": {}}}))
    rc = cli.main(["0.34.0", "--grid", "wrappers", "--dry-run", "--out", str(tmp_path / "w.jsonl.gz"), "--cc", "9.0"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["cells"] == 2 * 2 * 4  # KV auto/fp8 x images 0/1 x auto + 3 pins
    rc = cli.main(["0.34.0", "--grid", "wrappers", "--dry-run", "--out", str(tmp_path / "w.jsonl.gz"), "--mm", "1"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["cells"] == 5 * 2 * 4


def test_the_wrappers_grid_makes_every_wrapper_of_the_table():
    from kselect.selector.config.hf_table import table

    sys.path.insert(0, str(HERE))
    try:
        import registry_configs as rc
    finally:
        sys.path.remove(str(HERE))
    assert set(rc.WRAPPERS) == {a for a, r in table().architectures.items() if r.wraps is not None}
    published = json.loads(registry.WRAPPER_CONFIGS.read_text())
    assert {c["architectures"][0] for k, c in published.items() if not k.startswith("_")} <= set(rc.WRAPPERS)
    pytest.importorskip("transformers")
    from transformers import Gemma3Config

    d = rc.shrunk(Gemma3Config, "Gemma3ForConditionalGeneration")  # the text config shrunk, its pattern kept
    assert d["text_config"]["num_hidden_layers"] == rc.SHRUNK_LAYERS and d["text_config"]["layer_types"][5] == "full_attention"
