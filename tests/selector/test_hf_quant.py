"""Quantized checkpoints (#47): the KV-cache dtype `kv_cache=auto` takes from a checkpoint's quantization_config, as
vLLM 0.34.0 resolves it (resolve_kv_cache_dtype_string for ModelOpt, the attention layers for compressed-tensors),
the explanation naming the checkpoint as the source, and what vLLM refuses or sets aside. The presets' selections
themselves are held to vLLM's own chain in test_models_rules.py."""

from __future__ import annotations

import copy
import json

import pytest

from kselect.selector.api import compose, resolve
from kselect.selector.base.errors import SelectionError
from kselect.selector.config.hf_quant import checkpoint_kv, quant_config, refuses_e5m2
from kselect.selector.export.formats import render

MO = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
CT_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def q(qc: dict) -> dict:
    return {"quantization_config": qc}


@pytest.mark.parametrize("qc, dtype", [
    (MO, "fp8_e4m3"),  # ModelOpt's hf_quant_config.json layout: method from the producer
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}},
     "fp8_e4m3"),  # ModelOpt >= 0.31 in config.json
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "fp8"}, "fp8_e4m3"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"}, None),  # unknown: stays auto
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, None),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": CT_KV}, "fp8"),  # per layer, as vLLM's layers set it
    ({"quant_method": "compressed_tensors", "kv_cache_scheme": CT_KV}, "fp8"),  # the library's other spelling
])  # fmt: skip
def test_the_checkpoint_kv_dtype_follows_vllms_resolution(qc, dtype):
    ckv = checkpoint_kv(q(qc))
    assert ckv is not None and ckv.dtype == dtype
    assert ckv.source.startswith("the checkpoint's quantization_config: ")


@pytest.mark.parametrize("qc", [
    {"quant_method": "awq", "bits": 4}, {"quant_method": "fp8", "kv_cache_scheme": "static"},
    {"quant_method": "compressed-tensors", "kv_cache_scheme": None}, {"quant_method": "mxfp4"},
    {"quant_method": "modelopt", "quant_algo": "FP8"},
])
def test_a_checkpoint_that_says_nothing_about_the_kv_cache_leaves_auto(qc):
    assert checkpoint_kv(q(qc)) is None


@pytest.mark.parametrize("qc, words", [
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A8_AWQ"}}, "unknown ModelOpt quant algo"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}, "NVFP4 KV cache"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {**CT_KV, "num_bits": 4}}, "num_bits=8, type=float"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {**CT_KV, "symmetric": False}}, "symmetric"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {**CT_KV, "strategy": "channel"}}, "tensor or attn_head"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {**CT_KV, "strategy": "attn_head"}}, "per-head"),
    ({"quant_method": 3}, "quant_method"),
])  # fmt: skip
def test_a_kv_scheme_vllm_refuses_or_kselect_does_not_model_is_refused_by_name(qc, words):
    with pytest.raises(ValueError, match=words) as e:
        checkpoint_kv(q(qc))
    assert "model.hf_config" in str(e.value)


def test_the_quant_config_of_a_multimodal_wrapper_is_its_text_configs():
    assert quant_config({"text_config": q(MO)})["quant_method"] == "modelopt"
    assert quant_config({"model_type": "llama"}) is None
    # resolve_kv_cache_dtype_string reads the top-level quantization_config only: a nested one leaves auto
    assert checkpoint_kv({"text_config": q(MO)}) is None
    ct = {"quant_method": "compressed-tensors", "kv_cache_scheme": CT_KV}
    assert checkpoint_kv({"quantization_config": None, "compression_config": ct}).dtype == "fp8"


def test_e5m2_is_refused_where_the_checkpoint_loads_fp8_kv_scales():
    assert refuses_e5m2(q(MO), mla=False) and refuses_e5m2(q(MO), mla=True)  # ModelOpt: attention and MLA layers
    assert refuses_e5m2(q({"quant_method": "fp8"}), mla=False) and not refuses_e5m2(q({"quant_method": "fp8"}), mla=True)
    assert refuses_e5m2(q({"quant_method": "compressed-tensors", "kv_cache_scheme": CT_KV}), mla=False)
    assert not refuses_e5m2(q({"quant_method": "compressed-tensors", "kv_cache_scheme": None}), mla=False)
    assert not refuses_e5m2(q({"quant_method": "awq"}), mla=False) and not refuses_e5m2({}, mla=False)


# ---------------------------------------------------------------- selections and their explanation


@pytest.mark.parametrize("model, dtype, setting", [
    ("llama3_1_8b_fp8_modelopt", "fp8_e4m3", "modelopt kv_cache_quant_algo=FP8"),
    ("llama3_1_8b_fp8_kv_ct", "fp8_e4m3", "compressed-tensors kv_cache_scheme"),
])
def test_auto_on_a_quantized_checkpoint_names_the_checkpoint_in_text_json_and_trace(model, dtype, setting):
    cfg = compose(["platform=sm90", f"model={model}"])
    sel = resolve(cfg)
    plain = resolve(compose(["platform=sm90", "model=llama3_1_8b", "kv_cache=fp8"]))
    assert [(g.backend, g.kv_cache_dtype, g.quant_query) for g in sel.groups] == \
        [(g.backend, g.kv_cache_dtype, g.quant_query) for g in plain.groups]  # as an FP8 cache asked for
    assert all(g.kv_cache_dtype == dtype and g.kv_scales == "calibrated" for g in sel.groups)
    assert f"kv cache auto -> {dtype} (from" in render(sel, "table", False, cfg)
    text = render(sel, "table", True, cfg)
    assert "builtin.kv_cache_dtype_from_checkpoint" in text
    assert f"kv cache auto -> {dtype} (from the checkpoint's quantization_config: {setting}" in text, text
    env = json.loads(render(sel, "json", False, cfg))["environment"]
    assert env["kv_cache_dtype"] == "auto" and env["kv_cache_dtype_resolved"] == dtype
    assert setting in env["kv_cache_dtype_source"]
    assert "builtin.kv_cache_dtype_from_checkpoint" in sel.trace


def test_a_checkpoint_without_kv_quantization_keeps_the_model_dtype():
    sel = resolve(compose(["platform=sm90", "model=qwen2_5_7b_awq"]))
    assert sel.environment["kv_cache_dtype_source"] is None and sel.groups[0].kv_cache_dtype == "float16"


def test_an_explicit_kv_dtype_wins_with_a_typed_warning_and_strict_refuses_it():
    sel = resolve(compose(["platform=sm90", "model=llama3_1_8b_fp8_modelopt", "kv_cache=bfloat16"]))
    assert sel.groups[0].kv_cache_dtype == "bfloat16" and sel.environment["kv_cache_dtype_source"] is None
    (w,) = [w for w in sel.warnings if w.code == "setting_ignored"]
    assert "kv_cache_quant_algo=FP8" in w.setting and "kv_cache=bfloat16" in w.reason
    with pytest.raises(SelectionError, match="strict=true refuses"):
        resolve(compose(["platform=sm90", "model=llama3_1_8b_fp8_modelopt", "kv_cache=bfloat16", "strict=true"]))
    fp8 = resolve(compose(["platform=sm90", "model=llama3_1_8b_fp8_modelopt", "kv_cache=fp8"]))
    assert not [w for w in fp8.warnings if w.code == "setting_ignored"]  # the same FP8 cache: nothing set aside


def test_fp8_e5m2_on_a_checkpoint_with_fp8_kv_scales_is_refused_as_vllm_refuses_it():
    with pytest.raises(SelectionError, match="fp8_e5m2 kv-cache is not supported with fp8 checkpoints"):
        resolve(compose(["platform=sm90", "model=llama3_1_8b_fp8_modelopt", "kv_cache=fp8_e5m2"]))
    assert resolve(compose(["platform=sm90", "model=qwen2_5_7b_awq", "kv_cache=fp8_e5m2"])).groups


def test_a_compressed_tensors_kv_scheme_on_an_mla_model_keeps_auto():
    """vLLM's MLA layers do not read kv_cache_scheme (only Attention.__init__ does), nor check it."""
    raw = copy.deepcopy(compose(["platform=sm90", "model=deepseek_v3"]).model.hf_config)
    raw["quantization_config"] = {"quant_method": "compressed-tensors", "kv_cache_scheme": CT_KV}
    from kselect.selector.config.hf_model import HFModelConfig

    m = HFModelConfig.model_validate({"name": "ds", "architecture": "hf", "dtype": "bfloat16", "hf_config": raw})
    assert m.checkpoint_kv is None
    raw["quantization_config"]["kv_cache_scheme"] = {**CT_KV, "strategy": "attn_head"}
    assert HFModelConfig.model_validate({"name": "ds", "architecture": "hf", "dtype": "bfloat16",
                                         "hf_config": raw}).checkpoint_kv is None
