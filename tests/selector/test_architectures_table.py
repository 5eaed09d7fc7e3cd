"""The architecture table (conf/architectures/vllm_0_34_0.yaml, #47): every row names a vLLM model file, the
release overlay accepts exactly the table's architectures, docs/models.md's list is the generated one, and the
generic derivation refuses what vLLM's classes refuse."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kselect.selector.config.hf_arch import derive_layers
from kselect.selector.config.hf_table import table

ROOT = Path(__file__).resolve().parents[2]


def test_every_row_names_a_vllm_model_file():
    for name, row in table().architectures.items():
        assert re.fullmatch(r"vllm/(model_executor/)?models/[\w/]+\.py", row.file), (name, row.file)


def test_the_release_overlay_accepts_the_table():
    over = yaml.safe_load((ROOT / "conf/overlay/vllm_0_34_0_models.yaml").read_text())
    assert over["architectures"] == ["gemma4", *table().architectures]


def test_docs_list_is_generated_from_the_table():
    from kselect.oracle.registry_docs import DOC, SUMMARY, load_wrappers, render

    summary = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    assert DOC.read_text() == render(DOC.read_text(), summary, load_wrappers()), \
        "run python -m kselect.oracle.registry_docs"
    for name in table().architectures:
        assert f"`{name}`" in DOC.read_text()


def _qwen2(**kw) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 8, "num_attention_heads": 8,
            "num_key_value_heads": 2, "hidden_size": 1024, "torch_dtype": "bfloat16", **kw}


def test_qwen2_partial_sliding_window_is_refused_as_vllm_does():
    with pytest.raises(ValueError, match="max_window_layers.*some but all layers"):
        derive_layers(_qwen2(sliding_window=4096, use_sliding_window=True, max_window_layers=4))
    # all layers sliding, or the window off: accepted
    _, _, layers = derive_layers(_qwen2(sliding_window=4096, use_sliding_window=True, max_window_layers=8))
    assert {x.kind for x in layers} == {"sliding_window"}
    _, _, layers = derive_layers(_qwen2(sliding_window=4096, use_sliding_window=False, max_window_layers=4))
    assert {x.kind for x in layers} == {"full_attention"}


def test_a_field_of_the_wrong_type_names_it():
    with pytest.raises(ValueError, match=r"model\.hf_config\.num_hidden_layers: got 'True'; allowed: an integer 1\.\.512"):
        derive_layers(_qwen2(num_hidden_layers=True))
    with pytest.raises(ValueError, match=r"model\.hf_config\.n_head"):  # a renamed field under its config name
        derive_layers({"architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 1.5, "n_embd": 768})


def test_a_parallel_hybrid_layer_has_attention_and_state():
    cfg = {"architectures": ["FalconH1ForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 2, "hidden_size": 1024, "mamba_n_heads": 16, "mamba_d_head": 64,
           "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2}
    _, fam, layers = derive_layers(cfg)
    assert fam == "hybrid_mamba"
    assert [(x.index, x.kind) for x in layers] == [(0, "full_attention"), (0, "mamba"), (1, "full_attention"),
                                                   (1, "mamba")]
    # conv (kernel - 1, expand x hidden + 2 x groups x state), temporal (heads, head dim, state)
    assert layers[1].mamba_state == (((3, 2048 + 256), "model"), ((16, 64, 128), "model"))


def test_a_missing_mamba_width_is_named_as_the_architecture_reads_it():
    # vLLM's mamba.py reads `intermediate_size`; Jamba's row falls back to mamba_expand x hidden (its default 2)
    mamba = {"architectures": ["MambaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 768, "state_size": 16,
             "conv_kernel": 4}
    with pytest.raises(ValueError, match=r"model\.hf_config\.intermediate_size is missing"):
        derive_layers(mamba)
    _, _, layers = derive_layers({**mamba, "intermediate_size": 1536})
    assert layers[0].mamba_state == (((3, 1536), "model"), ((1536, 16), "model"))
    jamba = {"architectures": ["JambaForCausalLM"], "num_hidden_layers": 8, "num_attention_heads": 8,
             "num_key_value_heads": 2, "hidden_size": 1024}
    _, _, layers = derive_layers(jamba)
    assert next(x for x in layers if x.kind == "mamba").mamba_state[0] == ((3, 2048), "model")
