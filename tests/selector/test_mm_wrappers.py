"""Multimodal wrappers of the table's decoders (conf/architectures/vllm_0_34_0.yaml `wraps:`): Gemma-3, Qwen2-VL,
Qwen2.5-VL, LLaVA and Mistral-3, from configs shaped as their published config.json files
(kselect/oracle/wrapper_configs.json; no network). Their KV-cache layers are their language model's, selected as the
text model's where vLLM 0.34.0 builds the same layers; Gemma-3 serving images sets the mm-prefix mask; a wrapper
without its text config, or naming a language model kselect does not model, exits 2 naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kselect_inprocess import kselect_main

from kselect.selector.api import compose, resolve
from kselect.selector.base.cli_errors import call_main
from kselect.selector.config.hf_arch import derive_layers

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = {k: v for k, v in json.loads((ROOT / "kselect/oracle/wrapper_configs.json").read_text()).items()
             if not k.startswith("_")}
# per published config: (wrapper, its language model, layers, head size, KV heads, sliding layers' window or None,
# the full-attention layers where some slide)
EXPECTED = {
    "gemma-3-4b-it": ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM", 34, 256, 4, 1024, [5, 11, 17, 23, 29]),
    "gemma-3-27b-it": ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM", 62, 128, 16, 1024,
                       [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]),
    "Qwen2.5-VL-7B-Instruct": ("Qwen2_5_VLForConditionalGeneration", "Qwen2ForCausalLM", 28, 128, 4, None, None),
    "Qwen2-VL-7B-Instruct": ("Qwen2VLForConditionalGeneration", "Qwen2ForCausalLM", 28, 128, 4, None, None),
    "llava-1.5-7b-hf": ("LlavaForConditionalGeneration", "LlamaForCausalLM", 32, 128, 32, None, None),
    "Mistral-Small-3.1-24B-Instruct-2503": ("Mistral3ForConditionalGeneration", "MistralForCausalLM", 40, 128, 8, None,
                                            None),
}
FIELDS = ("kind", "layers", "head_size", "num_kv_heads", "sliding_window", "backend", "flash_attn_version",
          "kernel_block_size", "kv_block_size", "mm_prefix")


def _select(cfg: dict, tmp_path: Path, *extra: str, platform: str = "sm90"):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return resolve(compose([f"platform={platform}", "model=hf", f"model.hf_config={path}", *extra]))


def _rows(sel) -> list[list]:
    return [[getattr(g, f) for f in FIELDS] for g in sel.groups]


def _text_only(name: str) -> dict:
    """The language model's own config: the wrapper's text config (or, for Qwen2-VL, its top level) under the
    language model's name, the transformers defaults the wrapper's text config class fills in written out."""
    cfg = PUBLISHED[name]
    lm = EXPECTED[name][1]
    text = dict(cfg.get("text_config", cfg))
    if name.startswith("gemma-3-4b"):  # Gemma3TextConfig's defaults for the fields google/gemma-3-4b-it omits
        text.update(num_attention_heads=8, num_key_value_heads=4, head_dim=256)
    if name.startswith("llava"):  # LlamaConfig's defaults for the fields llava-1.5-7b-hf omits
        text.update(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32)
    return {**text, "architectures": [lm], "torch_dtype": cfg["torch_dtype"]}


def test_the_published_configs_cover_the_popular_wrappers():
    from kselect.selector.config.hf_table import table

    wrappers = {a for a, r in table().architectures.items() if r.wraps is not None}
    assert {e[0] for e in EXPECTED.values()} <= wrappers
    assert wrappers - {e[0] for e in EXPECTED.values()} == {"LlavaNextForConditionalGeneration",
                                                             "LlavaNextVideoForConditionalGeneration",
                                                             "LlavaOnevisionForConditionalGeneration"}
    assert set(PUBLISHED) == set(EXPECTED)


# LLaVA-NeXT (llava_next.py, llava_next_video.py) and LLaVA-OneVision (llava_onevision.py) build the language model
# their text_config names, as llava.py does; these configs are constructed here (not copies of published ones)
MISTRAL_TEXT = {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 4096,
                "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": None}


@pytest.mark.parametrize("wrapper", ["LlavaNextForConditionalGeneration", "LlavaNextVideoForConditionalGeneration"])
def test_llava_next_builds_the_text_configs_language_model(wrapper, tmp_path):
    cfg = {"architectures": [wrapper], "torch_dtype": "bfloat16", "text_config": MISTRAL_TEXT,
           "vision_config": {"model_type": "clip_vision_model"}}
    arch, family, layers = derive_layers(cfg)
    assert (arch, family, len(layers)) == (wrapper, "dense", 32)
    assert {(x.kind, x.head_size, x.num_kv_heads) for x in layers} == {("full_attention", 128, 8)}
    (tmp_path / "lm").mkdir()
    text = {**MISTRAL_TEXT, "torch_dtype": "bfloat16"}
    assert _rows(_select(cfg, tmp_path)) == _rows(_select(text, tmp_path / "lm"))


def test_llava_onevision_reads_a_qwen2_text_config_by_default():
    # LlavaOnevisionConfig gives a text_config without model_type the qwen2 class (and its defaults)
    cfg = {"architectures": ["LlavaOnevisionForConditionalGeneration"], "torch_dtype": "bfloat16",
           "text_config": {"hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28,
                           "num_key_value_heads": 4}}
    arch, _, layers = derive_layers(cfg)
    assert arch == "LlavaOnevisionForConditionalGeneration" and len(layers) == 28
    assert {(x.kind, x.head_size, x.num_kv_heads) for x in layers} == {("full_attention", 128, 4)}
    _, _, defaults = derive_layers({**cfg, "text_config": {}})
    assert {(x.head_size, x.num_kv_heads) for x in defaults} == {(128, 32)} and len(defaults) == 32


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_published_wrapper_config_is_accepted_with_its_language_models_layers(name):
    wrapper, _, n, head, kv, window, full = EXPECTED[name]
    arch, _, layers = derive_layers(PUBLISHED[name])
    assert arch == wrapper and len(layers) == n
    assert {(x.head_size, x.num_kv_heads) for x in layers} == {(head, kv)}
    if window is None:
        assert {x.kind for x in layers} == {"full_attention"}
    else:
        assert [x.index for x in layers if x.kind == "full_attention"] == full
        assert {x.window for x in layers if x.kind == "sliding_window"} == {window}


@pytest.mark.parametrize("platform", ["sm90", "sm100"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_wrapper_without_images_selects_as_its_language_model(name, platform, tmp_path):
    # gemma3_mm.py, qwen2_vl.py, qwen2_5_vl.py, llava.py, mistral3.py: the language model's layers are the cache's;
    # --language-model-only (model.multimodal=false) builds no vision tower and no mm-prefix mask
    wrapped = _select(PUBLISHED[name], tmp_path, platform=platform)
    (tmp_path / "lm").mkdir()
    text = _select(_text_only(name), tmp_path / "lm", platform=platform)
    assert _rows(wrapped) == _rows(text)
    assert wrapped.block_size == text.block_size
    assert not any(g.mm_prefix for g in wrapped.groups)


def test_gemma3_serving_images_sets_the_mm_prefix_mask(tmp_path):
    # gemma3_mm.py sets is_mm_prefix_lm: on SM90 the Triton/FlashAttention composite comes first (rule
    # priority-cuda_sm90_mm_prefix), as vLLM 0.34.0 picks for the wrappers grid's mm=1 cells
    sel = _select(PUBLISHED["gemma-3-4b-it"], tmp_path, "model.multimodal=true")
    assert {g.mm_prefix for g in sel.groups} == {True}
    assert {g.backend for g in sel.groups} == {"TRITON_FLASH_ATTN"}
    text = _select(PUBLISHED["gemma-3-4b-it"], tmp_path)
    assert {g.backend for g in text.groups} == {"FLASH_ATTN"}


@pytest.mark.parametrize("name", ["Qwen2.5-VL-7B-Instruct", "Qwen2-VL-7B-Instruct", "llava-1.5-7b-hf",
                                  "Mistral-Small-3.1-24B-Instruct-2503"])
def test_other_wrappers_serving_images_select_as_without(name, tmp_path):
    # no is_mm_prefix_lm for qwen2_vl / qwen2_5_vl / llava / mistral3 (model_arch_config_convertor.py): the vision
    # tower is built, the KV-cache layers' attention is the same
    with_images = _select(PUBLISHED[name], tmp_path, "model.multimodal=true")
    assert _rows(with_images) == _rows(_select(PUBLISHED[name], tmp_path))
    assert with_images.environment["multimodal"] is True


def test_the_vllm_command_serves_images_only_when_asked(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PUBLISHED["gemma-3-4b-it"]))
    for mm, flag in (("false", True), ("true", False)):
        got = call_main(kselect_main("select"), ["platform=sm90", "model=hf", f"model.hf_config={path}",
                                                 f"model.multimodal={mm}", "output=vllm"])
        out, err = capsys.readouterr()
        assert got == 0, err
        assert ("--language-model-only" in out) is flag, out


def test_a_text_config_given_at_the_top_level_is_qwen2_vls_own(tmp_path):
    # Qwen2_5_VLConfig builds its text config from the top-level fields of the published config; a text_config
    # beside them wins, as in transformers
    cfg = PUBLISHED["Qwen2.5-VL-7B-Instruct"]
    nested = {**cfg, "text_config": {**{k: cfg[k] for k in ("hidden_size", "num_attention_heads",
                                                             "num_key_value_heads", "max_window_layers",
                                                             "sliding_window", "use_sliding_window")},
                                     "num_hidden_layers": 4}}
    assert len(derive_layers(nested)[2]) == 4


# ---------------------------------------------------------------- bad input: exit 2, one paragraph, the key named


def _refused(capsys, tmp_path, cfg: dict, *extra: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    got = call_main(kselect_main("select"), ["platform=sm90", "model=hf", f"model.hf_config={path}", *extra])
    _, err = capsys.readouterr()
    assert got == 2, err[-2000:]
    assert "Traceback" not in err and err.strip() and "\n\n" not in err.strip(), err[-2000:]
    return err


@pytest.mark.parametrize("name", ["gemma-3-4b-it", "llava-1.5-7b-hf", "Mistral-Small-3.1-24B-Instruct-2503"])
def test_a_wrapper_without_its_text_config_names_the_key(name, tmp_path, capsys):
    cfg = {k: v for k, v in PUBLISHED[name].items() if k != "text_config"}
    err = _refused(capsys, tmp_path, cfg)
    assert "model.hf_config.text_config is missing" in err and EXPECTED[name][0] in err


def test_a_text_config_of_the_wrong_type_names_the_key(tmp_path, capsys):
    err = _refused(capsys, tmp_path, {**PUBLISHED["llava-1.5-7b-hf"], "text_config": [1, 2]})
    assert "model.hf_config.text_config: got list; allowed: an object" in err


def test_an_unknown_wrapper_is_refused_by_name(tmp_path, capsys):
    cfg = {**PUBLISHED["gemma-3-4b-it"], "architectures": ["PaliGemmaForConditionalGeneration"]}
    err = _refused(capsys, tmp_path, cfg)
    assert "model.hf_config.architectures: 'PaliGemmaForConditionalGeneration' is not an architecture kselect models" in err


def test_a_language_model_kselect_does_not_model_is_refused_by_its_key(tmp_path, capsys):
    llava = PUBLISHED["llava-1.5-7b-hf"]
    text = {k: v for k, v in llava["text_config"].items() if k != "architectures"}
    err = _refused(capsys, tmp_path, {**llava, "text_config": {**text, "model_type": "gpt_bigcode"}})
    assert "model.hf_config.text_config.model_type: got 'gpt_bigcode'" in err
    err = _refused(capsys, tmp_path, {**llava, "text_config": {**text, "architectures": ["FooForCausalLM"]}})
    assert "model.hf_config.text_config.architectures: 'FooForCausalLM' is not a language model kselect models" in err
    # a wrapper is no language model
    err = _refused(capsys, tmp_path, {**llava, "text_config": {**text, "architectures": ["LlavaForConditionalGeneration"]}})
    assert "model.hf_config.text_config.architectures" in err


def test_images_on_a_text_model_are_refused(tmp_path, capsys):
    err = _refused(capsys, tmp_path, _text_only("gemma-3-4b-it"), "model.multimodal=true")
    assert "model.multimodal" in err and "Gemma3ForCausalLM is a text model" in err
