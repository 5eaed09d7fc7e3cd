"""`model.hf_config=<org>/<name>[@revision]` (#47): config.json from the local Hugging Face cache, laid out as
huggingface_hub lays it out, read offline (sockets are blocked in every test here); a model not in the cache, or a
bad id, exits 2 naming what was searched and what is allowed."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from kselect_inprocess import kselect_main

from kselect.selector.api import compose, resolve
from kselect.selector.base.cli_errors import call_main

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = yaml.safe_load((ROOT / "conf" / "model" / "qwen3_8b.yaml").read_text())["hf_config"]
LLAMA_FP8 = yaml.safe_load((ROOT / "conf" / "model" / "llama3_1_8b_fp8_modelopt.yaml").read_text())["hf_config"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No network: any connection attempt fails the test."""

    def refuse(*a, **k):
        raise AssertionError("kselect opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def fake_cache(root: Path, repo: str, files: dict[str, dict], commit: str = "0123abcd", ref: str = "main") -> Path:
    """A hub cache as huggingface_hub writes it: models--org--name/refs/<ref> and snapshots/<commit>/<files>."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / ref).write_text(commit)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, obj in files.items():
        (snap / name).write_text(json.dumps(obj))
    return root


def test_a_hub_id_reads_config_json_from_the_cache_and_selects_as_the_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(tmp_path / "hub", "Qwen/Qwen3-8B", {"config.json": QWEN3})))
    cfg = compose(["platform=sm90", "model=hf", "model.hf_config=Qwen/Qwen3-8B"])
    assert cfg.model.name == "Qwen3-8B" and cfg.model.hub_id == "Qwen/Qwen3-8B" and cfg.model.repo_id == "Qwen/Qwen3-8B"
    assert cfg.model.source == "https://huggingface.co/Qwen/Qwen3-8B" and cfg.model.hub_revision is None
    a, b = resolve(cfg), resolve(compose(["platform=sm90", "model=qwen3_8b"]))
    assert [(g.kind, g.backend, g.kv_block_size) for g in a.groups] == [(g.kind, g.backend, g.kv_block_size) for g in b.groups]


def test_hf_home_and_a_revision_pick_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    hub = tmp_path / "home" / "hub"
    fake_cache(hub, "org/m", {"config.json": QWEN3}, commit="aaaa")
    fake_cache(hub, "org/m", {"config.json": {**QWEN3, "num_hidden_layers": 4}}, commit="bbbb", ref="small")
    assert len(compose(["platform=sm90", "model=hf", "model.hf_config=org/m"]).model.layers()) == 36
    by_branch = compose(["platform=sm90", "model=hf", "model.hf_config=org/m@small"]).model
    assert len(by_branch.layers()) == 4 and by_branch.hub_revision == "small"
    assert len(compose(["platform=sm90", "model=hf", "model.hf_config=org/m@aaaa"]).model.layers()) == 36


def test_a_modelopt_hf_quant_config_json_beside_it_is_merged_as_vllm_does(tmp_path, monkeypatch):
    base = {k: v for k, v in LLAMA_FP8.items() if k != "quantization_config"}
    files = {"config.json": base, "hf_quant_config.json": LLAMA_FP8["quantization_config"]}
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(tmp_path, "nvidia/Llama-3.1-8B-Instruct-FP8", files)))
    sel = resolve(compose(["platform=sm90", "model=hf", "model.hf_config=nvidia/Llama-3.1-8B-Instruct-FP8"]))
    assert sel.environment["kv_cache_dtype_resolved"] == "fp8_e4m3" and sel.groups[0].kv_cache_dtype == "fp8_e4m3"
    assert "modelopt kv_cache_quant_algo=FP8" in sel.environment["kv_cache_dtype_source"]


def bad(capsys, *argv: str) -> str:
    code = call_main(kselect_main("select"), ["platform=sm90", "model=hf", *argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "\n\n" not in err.strip(), (code, err)
    return err


def test_a_model_not_in_the_cache_exits_2_naming_the_folder_and_the_download(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    err = bad(capsys, "model.hf_config=Qwen/Qwen2.5-7B-Instruct@v1")
    assert str(tmp_path / "models--Qwen--Qwen2.5-7B-Instruct") in err, err
    assert "huggingface-cli download Qwen/Qwen2.5-7B-Instruct config.json --revision v1" in err, err
    assert "hf download Qwen/Qwen2.5-7B-Instruct config.json --revision v1" in err and "never the network" in err


@pytest.mark.parametrize("value", ["../x", "Qwen/../etc", "Qwen/Qwen3\x07", "Qwen/Qwen3-8B\n", "a/b/c@main",
                                   "Qwen/Qwen3-8B@../../etc", "-org/name", "org/na--me", "org/name@", "Qwen/Qwen3-8B\t"])
def test_a_bad_hub_id_is_refused_by_name(value, tmp_path, monkeypatch):
    from pydantic import ValidationError

    from kselect.selector.config.hf_model import HFModelConfig

    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(tmp_path, "Qwen/Qwen3-8B", {"config.json": QWEN3})))
    with pytest.raises(ValidationError) as e:
        HFModelConfig.model_validate({"name": "hf", "architecture": "hf", "dtype": "auto", "hf_config": value})
    msg = str(e.value)
    assert f"model.hf_config={value!r}" in msg and ("<org>/<name>[@revision]" in msg or "no such file" in msg), msg


def test_a_bad_hub_id_exits_2_from_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    err = bad(capsys, "model.hf_config=Qwen/Qwen3-8B@../../etc")
    assert "<org>/<name>[@revision]" in err, err


def test_a_snapshot_folder_given_by_path_is_named_by_its_repo(tmp_path):
    # before: the model was named after the snapshot's commit hash (`model 0123abcd ...`)
    snap = fake_cache(tmp_path, "Qwen/Qwen3-8B", {"config.json": QWEN3}) / "models--Qwen--Qwen3-8B/snapshots/0123abcd"
    for given in (snap, snap / "config.json"):
        cfg = compose(["platform=sm90", "model=hf", f"model.hf_config={given}"])
        assert cfg.model.name == "Qwen3-8B" and cfg.model.local_folder == str(snap)
