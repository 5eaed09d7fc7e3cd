"""The deployer's day (#51, done when): their own config.json, then select, explain and export, each typed into a
shell as the docs show it; the export, pasted into a shell, hands a stand-in `vllm` exactly the intended argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_export_paste import stand_in_vllm

from kselect.selector.api import compose

SHELL = "kselect select platform=h200 model=hf 'model.hf_config=~/models/My Model $(8B)' kv_cache=fp8"


def shell(line: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_own_config_select_explain_export_paste(tmp_path):
    home = tmp_path / "home"
    folder = home / "models" / "My Model $(8B)"
    folder.mkdir(parents=True)
    hf = compose(["model=llama3_1_8b"]).model.hf_config  # a published config.json, as the user downloaded it
    (folder / "config.json").write_text(json.dumps({**hf, "torch_dtype": "bfloat16"}))
    work = tmp_path / "work"
    work.mkdir()
    env = stand_in_vllm(tmp_path)
    env.update(HOME=str(home), CUDA_VISIBLE_DEVICES="",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")  # this interpreter's `kselect`

    table = shell(SHELL, env, work)
    assert table.returncode == 0, table.stderr
    assert "platform h200 (cuda, cc 9.0" in table.stdout and "model My_Model___8B_ bfloat16; kv cache fp8" in table.stdout
    assert "full_attention" in table.stdout and "FLASH_ATTN" in table.stdout

    explain = shell(SHELL.replace("kselect select", "kselect explain"), env, work)
    assert explain.returncode == 0, explain.stderr
    assert "Is an FP8 KV cache faster than bfloat16" in explain.stdout and "full_attention" in explain.stdout

    export = shell(SHELL + " output=vllm > serve.sh", env, work)
    assert export.returncode == 0, export.stderr
    pasted = shell("bash serve.sh", env, work)  # the file holds exactly what the user would paste
    assert pasted.returncode == 0, pasted.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == ["serve", str(folder), "--dtype", "bfloat16", "--kv-cache-dtype", "fp8"]
    assert sorted(p.name for p in work.iterdir()) == ["serve.sh"]  # nothing else ran
