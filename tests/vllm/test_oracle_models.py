"""The oracle beyond Gemma-4 (#42) without vLLM: an `architecture: hf` preset's config.json, the
record's group kind per vLLM KV-cache spec class, the `models` grid and its CLI, the model-family
packages of the release's venv, and the comparison counting an unresolvable model as a disagreement."""

import json
import re
from pathlib import Path

import pytest

from kselect.commands import oracle as cli
from kselect.oracle import env, vllm_chain
from kselect.oracle.cells import (ATTENTION_BACKENDS, HF_MODELS, MLA_BACKENDS, MODEL_BACKENDS, MODELS,
                                  SPARSE_MLA_BACKENDS, Cell, models_grid)
from kselect.oracle.models import hf_config_json, write_model_dirs
from kselect.selector.base.errors import KSelectError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "float16",
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "eos_token_id": [128001, 128008]}
PRESET = {"name": "llama_test", "architecture": "hf", "dtype": "bfloat16", "multimodal": False, "checkpoint": None,
          "source": "https://example.invalid/config.json", "hf_config": LLAMA}
CONF = Path(__file__).resolve().parents[2] / "conf" / "model"


# ------------------------------------------------------------------------- config.json


def test_an_hf_preset_is_written_as_its_config_json_with_the_presets_dtype(tmp_path):
    target, drafter = write_model_dirs(PRESET, tmp_path)
    assert drafter is None and target == tmp_path / "llama_test"
    written = json.loads((target / "config.json").read_text())
    assert written == {**LLAMA, "dtype": "bfloat16", "torch_dtype": "bfloat16"}  # everything else verbatim
    assert LLAMA["torch_dtype"] == "float16"  # the preset itself is not changed
    assert [p.name for p in tmp_path.iterdir()] == ["llama_test"]


def test_an_hf_config_without_torch_dtype_gets_dtype_only():
    cfg = {k: v for k, v in LLAMA.items() if k != "torch_dtype"}
    assert hf_config_json({**PRESET, "hf_config": cfg}) == {**cfg, "dtype": "bfloat16"}


def test_hf_config_may_be_a_config_json_or_its_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    for where in (tmp_path, tmp_path / "config.json"):
        assert hf_config_json({**PRESET, "hf_config": str(where)})["architectures"] == ["LlamaForCausalLM"]


@pytest.mark.parametrize("bad", [None, {}, [1, 2]])
def test_an_hf_preset_without_a_config_is_refused(bad, tmp_path):
    with pytest.raises(KSelectError, match="needs `hf_config`"):
        write_model_dirs({**PRESET, "hf_config": bad}, tmp_path)


def test_the_presets_in_conf_write_their_architecture(tmp_path):
    """Each #42 preset in conf/model (as they land) composes and writes the design's architecture."""
    from kselect.oracle.models import preset

    want = {"llama3_1_8b": "LlamaForCausalLM", "qwen3_8b": "Qwen3ForCausalLM", "mistral_7b_v0_3": "MistralForCausalLM",
            "gemma3_1b": "Gemma3ForCausalLM", "gpt_oss_20b": "GptOssForCausalLM", "gpt_oss_120b": "GptOssForCausalLM",
            "deepseek_v3": "DeepseekV3ForCausalLM", "kimi_k2": "DeepseekV3ForCausalLM",
            "deepseek_v3_2": "DeepseekV32ForCausalLM", "qwen3_next_80b_a3b": "Qwen3NextForCausalLM",
            "nemotron_h_8b": "NemotronHForCausalLM", "jamba_mini_1_7": "JambaForCausalLM",
            "llama4_scout": "Llama4ForConditionalGeneration", "llama3_1_8b_fp8_modelopt": "LlamaForCausalLM",
            "llama3_1_8b_fp8_kv_ct": "LlamaForCausalLM", "qwen2_5_7b_awq": "Qwen2ForCausalLM"}
    assert set(want) == set(HF_MODELS)
    present = [m for m in HF_MODELS if (CONF / f"{m}.yaml").is_file()]
    if not present:
        pytest.skip("no #42 preset in conf/model yet")
    for m in present:
        p = preset(m)
        target, drafter = write_model_dirs(p, tmp_path)
        cfg = json.loads((target / "config.json").read_text())
        assert drafter is None and cfg["architectures"] == [want[m]] and cfg["dtype"] == p["dtype"], m


def test_a_quantized_presets_quantization_config_reaches_vllm_as_published(tmp_path):
    """vLLM reads the KV-cache dtype of `auto` from the checkpoint's quantization_config: the oracle's config.json
    carries it unchanged (a ModelOpt hf_quant_config.json's layout, compressed-tensors' kv_cache_scheme)."""
    from kselect.oracle.models import preset

    for m in ("llama3_1_8b_fp8_modelopt", "llama3_1_8b_fp8_kv_ct", "qwen2_5_7b_awq"):
        p = preset(m)
        target, _ = write_model_dirs(p, tmp_path)
        written = json.loads((target / "config.json").read_text())["quantization_config"]
        assert written == json.loads(json.dumps(dict(p["hf_config"]["quantization_config"]))), m
    assert written["quant_method"] == "awq"


# ------------------------------------------------------------------------- group kinds


class KVCacheSpec:
    pass


class AttentionSpec(KVCacheSpec):
    pass


class FullAttentionSpec(AttentionSpec):
    pass


class MLAAttentionSpec(FullAttentionSpec):
    def __init__(self, cache_role="sparse"):
        self.cache_role = cache_role


class SinkFullAttentionSpec(FullAttentionSpec):
    pass


class SlidingWindowSpec(AttentionSpec):
    pass


class SlidingWindowMLASpec(SlidingWindowSpec):
    pass


class ChunkedLocalAttentionSpec(AttentionSpec):
    pass


class MambaSpec(KVCacheSpec):
    def __init__(self, mamba_type):
        self.mamba_type = mamba_type


class CrossAttentionSpec(AttentionSpec):
    pass


@pytest.mark.parametrize("spec, kind", [
    (FullAttentionSpec, "full_attention"),
    (SinkFullAttentionSpec, "full_attention"),
    (MLAAttentionSpec, "mla"),  # a FullAttentionSpec subclass, but MLA
    (MLAAttentionSpec(), "mla"),
    (MLAAttentionSpec("indexer"), "mla_indexer"),  # DeepSeek-V3.2's indexer cache
    (SlidingWindowSpec, "sliding_window"),
    (SlidingWindowMLASpec, "sliding_window"),
    (ChunkedLocalAttentionSpec, "chunked_local"),
    (MambaSpec, "mamba"),
    (MambaSpec("x"), "mamba"),
    (CrossAttentionSpec, "CrossAttentionSpec"),  # not a kind of the design: recorded by its class, never dropped
])
def test_group_kind_follows_the_spec_class(spec, kind):
    assert vllm_chain.group_kind(spec) == kind


def test_mamba_types_are_the_designs_names():
    class Enum:
        def __init__(self, name):
            self.name = name

    got = {n: vllm_chain.mamba_type(MambaSpec(Enum(n))) for n in ("MAMBA1", "MAMBA2", "GDN_ATTN", "LINEAR",
                                                                   "SHORT_CONV", "NEW_ONE")}
    assert got == {"MAMBA1": "mamba1", "MAMBA2": "mamba2", "GDN_ATTN": "gdn", "LINEAR": "linear",
                   "SHORT_CONV": "short_conv", "NEW_ONE": "new_one"}


def test_the_quant_query_of_a_mamba_layer_is_false_and_its_impl_is_the_layer():
    class Mixer:
        pass

    assert vllm_chain._quant_query(Mixer()) is False and vllm_chain._impl_name(Mixer()) == "Mixer"
    assert vllm_chain._fa_version(Mixer()) is None


# ------------------------------------------------------------------------- the models grid

KEY = re.compile(r"^cc=(8\.0|8\.9|9\.0|10\.0|12\.0)\|model=(\w+)\|kv=(auto|fp8)\|mm=0\|fa=-\|backend=(\w+)\|spec=none$")


def test_the_models_grid():
    cells = models_grid()
    assert len(cells) == 5 * 2 * (13 * 4 + 2 * 6 + 1 * 4) == 680
    assert len({c.key for c in cells}) == len(cells)
    assert {c.model for c in cells} == set(HF_MODELS) and not set(HF_MODELS) & set(MODELS)
    for c in cells:
        m = KEY.match(c.key)
        assert m and m.group(2) == c.model and m.group(4) == c.backend, c.key
        assert c.backend == "auto" or c.backend in MODEL_BACKENDS[c.model]
        assert Cell.from_dict(c.to_dict()) == c
    per = {m: sorted({c.backend for c in cells if c.model == m}) for m in HF_MODELS}
    assert per["llama3_1_8b"] == sorted(("auto",) + ATTENTION_BACKENDS)
    assert per["kimi_k2"] == per["deepseek_v3"] == sorted(("auto",) + MLA_BACKENDS)
    assert per["deepseek_v3_2"] == sorted(("auto",) + SPARSE_MLA_BACKENDS)
    assert set(MLA_BACKENDS) == {"FLASHMLA", "FLASH_ATTN_MLA", "FLASHINFER_MLA", "CUTLASS_MLA", "TRITON_MLA"}
    assert cells[0].key == "cc=8.0|model=llama3_1_8b|kv=auto|mm=0|fa=-|backend=auto|spec=none"


def test_a_models_grid_slice_keeps_each_familys_backends():
    cells = models_grid(ccs=["9.0"], models=["llama3_1_8b", "deepseek_v3"], kv_dtypes=["fp8"],
                        backends=["auto", "FLASHINFER", "FLASHMLA"])
    assert [c.key.split("|", 1)[1] for c in cells] == [
        "model=llama3_1_8b|kv=fp8|mm=0|fa=-|backend=auto|spec=none",
        "model=llama3_1_8b|kv=fp8|mm=0|fa=-|backend=FLASHINFER|spec=none",
        "model=deepseek_v3|kv=fp8|mm=0|fa=-|backend=auto|spec=none",
        "model=deepseek_v3|kv=fp8|mm=0|fa=-|backend=FLASHMLA|spec=none"]


def _tree(root: Path) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm-9.9.9.dist-info").mkdir()
    (root / "vllm-9.9.9.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 9.9.9\n")
    return root


def test_the_cli_runs_the_models_grid_on_request(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tree = _tree(tmp_path / "src")
    assert cli.main([str(tree), "--grid", "models", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["grid"] == "models" and plan["cells"] == 680 and plan["out"] == "oracle_models_9_9_9.jsonl.gz"
    assert cli.main([str(tree), "--grid", "models", "--cc", "9.0", "--model", "deepseek_v3_2", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["cells"] == 2 * 4
    assert cli.main([str(tree), "--dry-run"]) == 0  # the Gemma-4 grid stays the default
    plan = json.loads(capsys.readouterr().out)
    assert plan["grid"] == "gemma4" and plan["cells"] == 5760 and plan["out"] == "oracle_9_9_9.jsonl.gz"


@pytest.mark.parametrize("argv, words", [
    (["--grid", "models", "--mm", "1"], ["--mm '1'", "models grid", "allowed: 0"]),
    (["--grid", "models", "--model", "gemma4_31b"], ["--model 'gemma4_31b'", "models grid", "llama3_1_8b"]),
    (["--model", "llama3_1_8b"], ["--model 'llama3_1_8b'", "gemma4 grid", "gemma4_31b"]),
    (["--grid", "other"], ["--grid", "invalid choice"]),
])
def test_a_value_of_the_other_grid_is_bad_input(argv, words, tmp_path, capsys):
    tree = _tree(tmp_path / "src")
    assert cli.main([str(tree), *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "\n\n" not in err.strip()


# ------------------------------------------------------------------------- the release's venv


def test_an_existing_venv_gets_the_model_packages_once_without_dependencies(tmp_path):
    venv = tmp_path / "venv-9.9.9"
    venv.mkdir()
    (venv / ".done").write_text("")
    meta = "Requires-Dist: compressed-tensors==0.17.0\nRequires-Dist: transformers<5.23.0,>=5.16.1\n"
    calls = []
    for _ in range(2):
        env._ensure_venv("9.9.9", meta, tmp_path, lambda py, args: calls.append((py, args)), quiet=True)
    want = env.model_deps(meta)  # at the release's pins where it has them; mistral_common for llava.py / mistral3.py
    assert want[:3] == ["compressed-tensors==0.17.0", "loguru", "mistral_common"]
    assert calls == [(venv / "bin" / "python", ["--no-deps", *want])]
    assert (venv / ".extras").read_text().split() == want


# ------------------------------------------------------------------------- comparison


def test_a_model_kselect_cannot_resolve_counts_as_a_disagreement(monkeypatch):
    from kselect.oracle import compare as cmp

    def boom(cell):
        raise RuntimeError("no hf models here yet")

    monkeypatch.setattr(cmp, "_matrix_cell", boom)  # whatever kselect raises on the way to a selection
    hf = Cell("9.0", "llama3_1_8b", "auto", False, None, "auto", "none")
    ks = cmp.kselect_records([hf])
    assert ks[hf.key]["groups"] == {} and "kselect cannot resolve model llama3_1_8b" in ks[hf.key]["error"]
    rec = {"key": hf.key, "cell": hf.to_dict(), "error": None,
           "groups": {"full_attention": {"backend": "FLASH_ATTN", "fa_version": 3, "kernel_block": 64,
                                         "kv_block": 64, "quant_query": False}}}
    rep = cmp.compare([rec], kselect=ks)
    assert rep.checks["error"] == 1 and rep.agree["error"] == 0
    assert sum(rep.checks.values()) == 6 and sum(rep.agree.values()) == 0  # no cell or field skipped
    gemma = Cell("9.0", "gemma4_31b", "auto", False, None, "auto", "none")
    with pytest.raises(RuntimeError, match="no hf models"):  # a Gemma cell's crash is a bug, not a refusal
        cmp.kselect_records([gemma])

