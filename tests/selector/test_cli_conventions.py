"""What a command-line user expects (#51, CLI conventions): `kselect --version`, GPU names as platform presets, a
short `--help` per command with the full one a flag away, tab completion through the `kselect` entry, the near key
for a typo, `~` in a path, and a JSON Schema that `output=json` validates against."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kselect_inprocess import kselect_main
from kselect.selector.api import CONF_DIR, compose, resolve
from kselect.selector.base.cli_errors import call_main
from kselect.selector.export.formats import render
from kselect.selector.export.json_schema import SCHEMA_VERSION, selection_schema

ROOT = Path(__file__).resolve().parents[2]
HYDRA_APPS = ("select", "diff", "matrix", "plot", "sweep", "explain", "claims", "run")


def kselect(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kselect.cli", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def inprocess(command: str, *argv: str, capsys) -> tuple[int, str, str]:
    code = call_main(kselect_main(command), list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_names_the_package_and_its_commit():
    p = kselect("--version")
    assert p.returncode == 0, p.stderr
    from kselect import __version__

    assert re.fullmatch(rf"kselect {re.escape(__version__)} \(commit ([0-9a-f]{{40}}|unknown)[^)]*\)\n", p.stdout), p.stdout


# ---------------------------------------------------------------- GPU names as platform presets

GPUS = {"a100": (8, 0), "l4": (8, 9), "l40s": (8, 9), "rtx4090": (8, 9), "h100": (9, 0), "h200": (9, 0), "gh200": (9, 0),
        "b200": (10, 0), "gb200": (10, 0), "rtx5090": (12, 0), "rtx5080": (12, 0), "rtx_pro_6000": (12, 0)}
BY_CC = {(8, 0): "sm80", (8, 9): "sm89", (9, 0): "sm90", (10, 0): "sm100", (12, 0): "sm120"}


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_a_gpu_name_is_its_capabilitys_preset(gpu):
    """Same capability and kernel packages as the capability's preset; the GPU names its own data (gpu_model)."""
    mine, base = (yaml.safe_load((CONF_DIR / "platform" / f"{n}.yaml").read_text()) for n in (gpu, BY_CC[GPUS[gpu]]))
    assert tuple(mine["compute_capability"]) == GPUS[gpu]
    assert {k: v for k, v in mine.items() if k not in ("name", "gpu_model")} == \
        {k: v for k, v in base.items() if k not in ("name", "gpu_model")}
    assert mine["name"] == gpu and mine["gpu_model"].startswith(f"nvidia_{gpu}")  # + the variant, as the device names it


def test_platform_h100_selects_as_sm90():
    fields = lambda s: [(g.kind, g.backend, g.flash_attn_version, g.kernel_block_size, g.kv_block_size) for g in s.groups]  # noqa: E731
    h100, sm90 = (resolve(compose([f"platform={p}", "model=gemma4_31b", "kv_cache=fp8"])) for p in ("h100", "sm90"))
    assert fields(h100) == fields(sm90) and h100.environment["platform"] == "h100"


def test_every_gpu_preset_is_listed_in_the_docs():
    text = (ROOT / "docs" / "selecting.md").read_text()
    assert all(f"`{gpu}`" in text for gpu in GPUS)


# ---------------------------------------------------------------- help


@pytest.mark.parametrize("command", HYDRA_APPS)
def test_help_is_a_page(command, capsys):
    code, out, _ = inprocess(command, "--help", capsys=capsys)
    assert code == 0 and 5 < len(out.splitlines()) <= 60, out
    assert f"kselect {command} --help-all" in out and "--hydra-help" in out


@pytest.mark.parametrize("command", ("gather", "conformance", "perf", "oracle", "bench"))
def test_help_of_the_other_commands_is_a_page(command):
    from kselect.cli import command as entry

    with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(io.StringIO()) as out:
        sys.argv = [f"kselect {command}", "--help"]
        entry(command)()
    assert e.value.code == 0 and 3 < len(out.getvalue().splitlines()) <= 60, out.getvalue()


def test_help_names_the_groups_and_the_most_used_keys(capsys):
    _, out, _ = inprocess("select", "--help", capsys=capsys)
    assert re.search(r"(?m)^  platform: .*\bh100\b", out) and re.search(r"(?ms)^  model: .*\bllama3_1_8b\b.*^  kv_cache:", out)
    assert "output=table" in out and "model.checkpoint=" in out and "kv_cache.dtype=" in out


def test_help_all_is_hydras_whole_help():
    p = kselect("select", "--help-all")
    assert p.returncode == 0 and len(p.stdout.splitlines()) > 200 and "== Config ==" in p.stdout


# ---------------------------------------------------------------- shell completion

COMPLETE = r"""
eval "$(kselect select -sc install=bash)"
t() { COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"; COMP_CWORD=$((${#COMP_WORDS[@]}-1))
      _kselect_completion; echo "${COMPREPLY[*]}"; }
t "kselect se"
t "kselect select kv_cache=fp8 platform=h"
"""


def test_tab_completion_through_the_kselect_entry(tmp_path):
    """The script `kselect <command> -sc install=bash` prints, its function called as bash calls it on <TAB>."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.run(["bash", "-c", COMPLETE], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["select", "platform=h100 platform=h200"], p.stdout + p.stderr


def test_completion_refuses_another_shell(capsys):
    code, _, err = inprocess("select", "-sc", "install=tcsh", capsys=capsys)
    assert code == 2 and "allowed: install=bash" in err


def test_a_query_typed_by_hand_is_no_traceback(capsys, monkeypatch):
    """Hydra reads COMP_LINE unguarded (KeyError); bash sets it, a person typing the query does not."""
    monkeypatch.delenv("COMP_LINE", raising=False)
    code, _, err = inprocess("select", "-sc", "query=bash", capsys=capsys)
    assert code == 2 and "COMP_LINE unset" in err and "Traceback" not in err


# ---------------------------------------------------------------- typos and ~


@pytest.mark.parametrize("argv, hint", [
    (("outptu=json",), "did you mean output=json?"),
    (("platfrom=sm90",), "did you mean platform=sm90?"),
    (("model.checkpont=x",), "did you mean model.checkpoint=x?"),
    (("platform=h10",), "did you mean platform=h100?"),
])
def test_a_typo_names_the_near_key(argv, hint, capsys):
    code, _, err = inprocess("select", *argv, capsys=capsys)
    assert code == 2 and hint in err and "+outptu" not in err, err


def test_a_new_key_of_a_mapping_is_told_its_plus(capsys):
    # before: "did you mean attention.backend_per_kind=TRITON_ATTN?", a key that takes a mapping, not a backend
    code, _, err = inprocess("select", "platform=sm90", "attention.backend_per_kind.sliding_window=TRITON_ATTN",
                             capsys=capsys)
    assert code == 2 and "write +attention.backend_per_kind.sliding_window=TRITON_ATTN" in err, err
    assert "did you mean" not in err
    code, out, err = inprocess("select", "platform=sm90", "+attention.backend_per_kind.sliding_window=TRITON_ATTN",
                               capsys=capsys)
    assert code == 0, err  # as told, it selects


def test_diff_typo_names_its_own_key(capsys):
    code, _, err = inprocess("diff", "formt=json", capsys=capsys)
    assert code == 2 and "did you mean format=json?" in err, err


def test_an_unquoted_tilde_is_the_home_folder(tmp_path):
    home = tmp_path / "home"
    (home / "m").mkdir(parents=True)
    hf = compose(["model=llama3_1_8b"]).model.hf_config
    (home / "m" / "config.json").write_text(json.dumps({**hf, "torch_dtype": "bfloat16"}))
    p = kselect("select", "platform=sm90", "model=hf", "model.hf_config=~/m", "output=vllm",
                env={**os.environ, "HOME": str(home)}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"vllm serve {home / 'm'} ")


# ---------------------------------------------------------------- the JSON Schema


def test_the_published_schema_is_the_models():
    published = json.loads((ROOT / "docs" / "selection.schema.json").read_text())
    assert published == selection_schema(), "regenerate: python -m kselect.selector.export.json_schema > docs/selection.schema.json"


@pytest.mark.parametrize("args", [
    ("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "spec_decode=mtp"),
    ("platform=b200", "model=gpt_oss_20b"),
    ("platform=sm90", "model=deepseek_v3", "kv_cache=fp8"),
    ("platform=sm90", "model=nemotron_h_8b"),
    ("platform=cpu", "model=gemma4_tiny"),
])
def test_json_output_validates_against_the_schema(args):
    jsonschema = pytest.importorskip("jsonschema")
    cfg = compose(list(args))
    doc = json.loads(render(resolve(cfg), "json"))
    assert doc["schema_version"] == SCHEMA_VERSION
    jsonschema.Draft202012Validator(selection_schema()).validate(doc)
    broken = {**doc, "groups": [{**doc["groups"][0], "backend": 3}]}
    assert not jsonschema.Draft202012Validator(selection_schema()).is_valid(broken)
