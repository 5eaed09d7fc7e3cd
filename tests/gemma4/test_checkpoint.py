"""Checkpoints (HF save_pretrained folders, shards, prefixes, clear errors), seeded weights,
the bundled tokenizer, and model presets -> HF configs."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from g4_helpers import HF_RTOL, hf_logits
from kselect.gemma4.checkpoint import (BUNDLED_TOKENIZER, CheckpointError, build_random, load_checkpoint,
                               load_tokenizer, save_checkpoint)
from kselect.gemma4.config import FULL, SLIDING, Gemma4Args
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from g4_helpers import simple_selection  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "conf" / "model").glob("gemma4_*.yaml"))


@pytest.fixture(scope="module")
def hf_folder(models, tmp_path_factory):
    """The 'all' twin written by HF's save_pretrained in small shards (with an index)."""
    _, hf = models["all"]
    path = tmp_path_factory.mktemp("hf_all")
    hf.save_pretrained(path, max_shard_size="300KB")
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("*.safetensors"))) > 3
    return path


def logits_of(model, tokens):
    e = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=1, max_seq_len=64))
    return e.extend([0], [tokens], all_logits=True)[0]


def test_hf_save_pretrained_loads_with_same_logits(models, prompts, hf_folder):
    ours, hf = models["all"]
    loaded = load_checkpoint(hf_folder)
    assert loaded.args == ours.args
    for a, b in zip(loaded.state_dict().values(), ours.state_dict().values()):
        assert torch.equal(a, b)
    got = logits_of(loaded, prompts[0])
    assert max_rel_error(got, hf_logits(hf, prompts[0])) < HF_RTOL
    assert torch.equal(got, logits_of(ours, prompts[0]))


def test_conditional_generation_prefix_and_towers_are_handled(models, prompts, tmp_path):
    """`model.language_model.` names, a nested text_config, and vision tensors to skip."""
    ours, _ = models["edge"]
    save_checkpoint(ours, tmp_path)
    sd = load_file(tmp_path / "model.safetensors")
    sd = {k.replace("model.", "model.language_model.", 1): v for k, v in sd.items()}
    sd["model.vision_tower.encoder.weight"] = torch.zeros(3)
    sd["lm_head.weight"] = sd["model.language_model.embed_tokens.weight"].clone()
    save_file(sd, tmp_path / "model.safetensors")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4", "text_config": cfg}))
    loaded = load_checkpoint(tmp_path)
    assert torch.equal(logits_of(loaded, prompts[1]), logits_of(ours, prompts[1]))


def test_our_checkpoint_loads_in_hf(models, prompts, tmp_path):
    from transformers import AutoModelForCausalLM

    ours, _ = models["large"]
    save_checkpoint(ours, tmp_path, shard_bytes=200_000)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert max_rel_error(logits_of(ours, prompts[2]), hf_logits(hf, prompts[2])) < HF_RTOL


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_tensor(folder, name, fn):
    """Rewrite the shard holding `name` with fn(state dict) applied."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"][name]
    sd = load_file(shard)
    fn(sd)
    save_file(sd, shard)


def test_missing_tensor_is_named(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    _edit_tensor(f, "model.layers.2.self_attn.k_proj.weight", lambda sd: sd.pop("model.layers.2.self_attn.k_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.2\.self_attn\.k_proj\.weight'"):
        load_checkpoint(f)


def test_unexpected_tensor_is_named(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    # K=V global layers have no v_proj: one more is unexpected
    _edit_tensor(f, "model.layers.2.self_attn.k_proj.weight",
                 lambda sd: sd.__setitem__("model.layers.2.self_attn.v_proj.weight", torch.zeros(128, 256)))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.2\.self_attn\.v_proj\.weight'"):
        load_checkpoint(f)


def test_wrong_shape_is_named(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    name = "model.layers.0.mlp.up_proj.weight"
    _edit_tensor(f, name, lambda sd: sd.__setitem__(name, torch.zeros(256, 256)))
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.up_proj\.weight' has shape \(256, 256\), "
                                              r"the model expects \(512, 256\)"):
        load_checkpoint(f)


def test_mismatched_config_fails_clearly(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    cfg = json.loads((f / "config.json").read_text())
    cfg["intermediate_size"] = 384
    (f / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"mlp\.gate_proj\.weight' has shape \(512, 256\), the model expects \(384, 256\)"):
        load_checkpoint(f)


def test_truncated_shard_fails_clearly(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    shard = sorted(f.glob("*.safetensors"))[1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=rf"{shard.name}.*corrupted"):
        load_checkpoint(f)


def test_garbage_header_fails_clearly(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    shard = sorted(f.glob("*.safetensors"))[0]
    shard.write_bytes(b"\xff" * 64 + shard.read_bytes()[64:])
    with pytest.raises(CheckpointError, match=rf"{shard.name}.*corrupted"):
        load_checkpoint(f)


def test_missing_shard_and_pickles_and_config(hf_folder, tmp_path):
    f = _copy(hf_folder, tmp_path / "ck")
    shard = sorted(f.glob("*.safetensors"))[2]
    shard.unlink()
    with pytest.raises(CheckpointError, match=rf"lists shard {shard.name}, which is missing"):
        load_checkpoint(f)
    p = tmp_path / "pickle"
    p.mkdir()
    shutil.copy(f / "config.json", p / "config.json")
    (p / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(CheckpointError, match=r"no \.safetensors files.*pickle"):
        load_checkpoint(p)
    with pytest.raises(CheckpointError, match="no config.json"):
        load_checkpoint(tmp_path)


# ------------------------------------------------------------------------------ seeded weights


def test_bundled_tiny_weights_are_deterministic():
    d = yaml.safe_load((ROOT / "conf" / "model" / "gemma4_tiny.yaml").read_text())
    args = Gemma4Args.from_model_config(d)
    a, b, c = build_random(args, seed=0), build_random(args, seed=0), build_random(args, seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["layers.0.self_attn.q_proj.weight"], sc["layers.0.self_attn.q_proj.weight"])
    w = sa["layers.1.input_layernorm.weight"]
    assert 0.02 < w.std() < 0.3 and abs(w.mean() - 1) < 0.05  # perturbed around 1
    assert abs(float(sa["layers.3.layer_scalar"]) - 1) > 1e-4
    # every feature is on in the bundled model
    assert args.num_kv_shared_layers and args.hidden_size_per_layer_input and args.enable_moe_block
    assert args.attention_k_eq_v and args.use_double_wide_mlp and args.head_dim != args.global_head_dim


# ------------------------------------------------------------------------------ tokenizer


def test_bundled_tokenizer_is_deterministic_and_fits():
    from kselect.gemma4.tokenizer import build_tokenizer

    stored = load_tokenizer()
    assert stored.to_str() == build_tokenizer().to_str()
    assert stored.get_vocab_size() == 512
    assert [stored.token_to_id(t) for t in ("<pad>", "<eos>", "<bos>")] == [0, 1, 2]
    text = "Héllo, wörld! The kernel 42 ✓"
    assert stored.decode(stored.encode(text).ids) == text  # byte-level: any text round-trips
    assert BUNDLED_TOKENIZER.stat().st_size < 64_000


def test_checkpoint_folder_brings_its_tokenizer(models, tmp_path):
    from tokenizers import Tokenizer, models as tm, pre_tokenizers

    tok = Tokenizer(tm.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    assert load_tokenizer(tmp_path).encode("b a").ids == [1, 0]
    with pytest.raises(CheckpointError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "nope")


# ------------------------------------------------------------------------------ presets


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_presets_match_hf_config(preset):
    d = yaml.safe_load(preset.read_text())
    args = Gemma4Args.from_model_config(d)
    hfc = args.to_hf_text_config()
    assert hfc.layer_types == args.layer_types and args.layer_types[-1] == FULL
    every = d["full_attention_every"]
    assert [i for i, t in enumerate(args.layer_types) if t == FULL] == (
        [i for i in range(args.num_hidden_layers) if (i + 1) % every == 0 or i == args.num_hidden_layers - 1])
    modes = hfc.kv_sharing_modes  # (HF 5.23 marks no 'store' layers without sharing; we always do)
    assert [m == "reuse" for m in modes] == [m == "reuse" for m in args.kv_sharing_modes()]
    for i, m in enumerate(modes):
        if m == "reuse":
            src = args.kv_source(i)
            assert modes[src] == "store" and args.layer_types[src] == args.layer_types[i]
    for i in range(args.num_hidden_layers):
        assert args.layer_head_dim(i) == hfc.per_layer_config[i].head_dim
        assert args.num_kv_heads(i) == hfc.per_layer_config[i].num_key_value_heads
    assert Gemma4Args.from_hf_config(hfc.to_dict()) == Gemma4Args(**{**args.to_dict(), "name": "gemma4"})


def test_e2b_structure():
    d = yaml.safe_load((ROOT / "conf" / "model" / "gemma4_e2b.yaml").read_text())
    args = Gemma4Args.from_model_config(d)
    assert [i for i, t in enumerate(args.layer_types) if t == FULL][:3] == [4, 9, 14]
    assert args.kv_source(15) == 13 and args.kv_source(19) == 14 and args.kv_source(34) == 14
    assert args.mlp_intermediate(14) == 6144 and args.mlp_intermediate(15) == 12288
    assert args.layer_types[13] == SLIDING
