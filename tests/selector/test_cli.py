"""`kselect select` as a user runs it: output formats, exit codes, and no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, module: str = "kselect.commands.select") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_json_output_has_the_documented_fields():
    p = run("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "output=json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [g["kind"] for g in d["groups"]] == ["sliding_window", "full_attention"]
    for g in d["groups"]:
        for key in ("kind", "layers", "head_size", "backend", "flash_attn_version", "kernel_block_size",
                    "kv_block_size", "quant_query", "rejected", "trace"):
            assert key in g
        assert g["backend"] == "FLASH_ATTN" and isinstance(g["rejected"], dict)
    assert [g["flash_attn_version"] for g in d["groups"]] == [3, 4]  # vLLM 0.33.0 and 0.34.0: per layer on SM90 FP8
    assert d["environment"]["rules"] == "vllm_0_34_0"  # the default rules: the newest release
    assert d["groups"][1]["layers"] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]


def test_table_explains_choice_and_rejections():
    p = run("rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "model.multimodal=true", "verbose=true")
    assert p.returncode == 0, p.stderr
    assert "TRITON_ATTN" in p.stdout
    assert "rejected FLASHINFER: partial multimodal token full attention not supported" in p.stdout
    assert "trace:" in p.stdout


def test_vllm_and_markdown_outputs():
    p = run("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "attention.flash_attn_version=3", "output=vllm")
    assert p.returncode == 0, p.stderr
    assert "--block-size" not in p.stdout and '"flash_attn_version":3' in p.stdout
    p = run("rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "overlay=[pr48666]", "output=vllm")
    assert p.returncode == 2 and "vLLM 0.33.0 cannot express this selection" in p.stderr and p.stderr.count("\n") == 1
    m = run("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "output=markdown")
    assert m.stdout.startswith("**kselect selection**") and "| sliding_window |" in m.stdout


@pytest.mark.parametrize(
    "args, key",
    [
        (["kv_cache=fp9"], "kv_cache"),
        (["kv_cache.dtype=fp9"], "kv_cache.dtype"),
        (["attention.backend=NOPE"], "attention.backend"),
        (["+model.bogus=1"], "model.bogus"),
        (["output=yaml"], "output"),
        (["kv_cache.scales=calibrated"], "kv_cache.scales"),
    ],
)
def test_invalid_config_exit_2_one_paragraph(args, key):
    p = run(*args)
    assert p.returncode == 2
    assert key in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1  # one paragraph


def test_no_valid_backend_exit_2_with_every_reason():
    p = run("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "model.dtype=float32",
            "attention.flash_attn_version=3", "platform.packages.flashinfer=false", "platform.packages.triton=false")
    assert p.returncode == 2
    for name in ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"):
        assert f"  {name}: " in p.stderr
    assert "Traceback" not in p.stderr


def test_named_platform_never_imports_torch():
    code = (
        "import sys; sys.argv=['selector','platform=sm90','model=gemma4_31b','kv_cache=fp8'];"
        "import runpy, io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: runpy.run_module('kselect.commands.select', run_name='__main__')\n"
        "    except SystemExit: pass\n"
        "print('torch' in sys.modules)"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "False", p.stderr


def test_platform_auto_detects_this_machine():
    p = run("output=json")  # default platform=auto
    assert p.returncode == 0, p.stderr
    env = json.loads(p.stdout)["environment"]
    import torch

    if torch.cuda.is_available():
        assert env["device"] == "cuda" and env["compute_capability"] == list(torch.cuda.get_device_capability())
    else:
        assert env["platform"] == "cpu" and env["device"] == "cpu"
        assert {g["backend"] for g in json.loads(p.stdout)["groups"]} == {"TORCH_REFERENCE"}
