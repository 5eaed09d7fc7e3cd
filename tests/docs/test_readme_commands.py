"""The README's commands still run. COMMANDS lists every command line of the README's code blocks with how it is
checked; a README that shows a command not on the list, or drops one the list holds, fails here, so the list
cannot go stale. The quick ones run on CPU from an empty directory: their exit status, no traceback, and the
output the README describes. (A wider pass over the docs' commands from a wheel:
kselect.measurement.review.readme_pass.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# The README names the default rules (`vllm_X_Y_Z` is the default); the first select must print the same.
_DEFAULT = re.search(r"`(vllm_\d+_\d+_\d+)` is the default", (ROOT / "README.md").read_text())
README_DEFAULT_RULES = _DEFAULT.group(1) if _DEFAULT else "<the README names no default rules>"


@dataclass(frozen=True)
class Run:
    """Run `cmd` (bash, from an empty directory), expect exit status `rc` and every regex of `shows` in its output."""
    cmd: str
    shows: tuple[str, ...] = ()
    rc: int = 0


@dataclass(frozen=True)
class Skip:
    why: str


# The README's code-block lines (trailing comments dropped) -> how each is checked.
COMMANDS: dict[str, Run | Skip] = {
    # --without-pip: the venv and its activation are what is checked; pip's bootstrap would add ~10 s.
    "python -m venv .venv && . .venv/bin/activate": Run(
        f'{PY} -m venv --without-pip .venv && . .venv/bin/activate && test "$VIRTUAL_ENV" = "$PWD/.venv"'
        " && command -v python",
        shows=(r"\.venv/bin/python",)),
    # The install half is .ci/run's own install line; the main job runs here.
    'pip install torch==2.13.0 -e ".[test,sweep]" && kselect run': Run(
        "kselect run", shows=(r"attention backend per group", r"tokens/s",
                             # on CPU (this test) the README says the reference has nothing to be checked against
                             r"numerics: not checked: every group runs TORCH_REFERENCE")),
    "python -m pytest -n auto": Skip("the whole suite: what .ci/run runs"),
    "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8": Run(
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8",
        shows=(r"(?m)^sliding_window\s", r"(?m)^full_attention\s", r"why: ", rf"rules {README_DEFAULT_RULES};")),
    "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 objective=latency": Run(
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 objective=latency",
        shows=(r"chosen by objective latency", r"runner-up", r"vLLM's choice")),
    # the same command opens reviewing.md: test_docs_commands.py runs it once, and checks that page's excerpt of it
    "kselect diff matrix=seed b.overlay=[pr48666] format=markdown": Skip("run by test_docs_commands.py (reviewing.md)"),
    # Any model: each family's line shows what the README's comment says (the oracle holds it to vLLM's own code)
    "kselect select platform=sm90 model=llama3_1_8b": Run(
        "kselect select platform=sm90 model=llama3_1_8b", shows=(r"(?m)^full_attention\s.*FLASH_ATTN\s+3\s+64\s+64\s",)),
    "kselect select platform=sm100 model=gpt_oss_20b": Run(
        "kselect select platform=sm100 model=gpt_oss_20b",
        shows=(r"(?m)^sliding_window\s.*FLASHINFER\s", r"(?m)^full_attention\s.*FLASHINFER\s")),
    "kselect select platform=sm90 model=deepseek_v3 kv_cache=fp8": Run(
        "kselect select platform=sm90 model=deepseek_v3 kv_cache=fp8", shows=(r"(?m)^mla\s.*FLASHMLA\s.*fp8_e4m3\s+yes\s",)),
    "kselect select platform=sm90 model=nemotron_h_8b": Run(
        "kselect select platform=sm90 model=nemotron_h_8b",
        shows=(r"cache block 1088", r"(?m)^mamba\s.*MAMBA2_ATTN\s")),
    "kselect select platform=sm90 model=llama4_scout": Run(
        "kselect select platform=sm90 model=llama4_scout", shows=(r"(?m)^chunked_local\s", r"(?m)^full_attention\s")),
    "kselect select platform=sm90 model=llama3_1_8b_fp8_modelopt": Run(
        "kselect select platform=sm90 model=llama3_1_8b_fp8_modelopt",
        shows=(r"kv cache auto -> fp8_e4m3 \(from the checkpoint's quantization_config: modelopt",
               r"(?m)^full_attention\s.*FLASH_ATTN\s+3\s.*fp8_e4m3\s+yes\s")),
    # an empty cache here: the model is not in it, so kselect names the folder searched and the download (exit 2)
    "kselect select platform=sm90 model=hf model.hf_config=Qwen/Qwen2.5-7B-Instruct": Run(
        "HF_HUB_CACHE=$PWD/hub kselect select platform=sm90 model=hf model.hf_config=Qwen/Qwen2.5-7B-Instruct",
        shows=(r"models--Qwen--Qwen2\.5-7B-Instruct", r"huggingface-cli download Qwen/Qwen2\.5-7B-Instruct config\.json"),
        rc=2),
}


def readme_commands() -> list[str]:
    """Every non-empty line of the README's ```bash blocks, its trailing `# comment` dropped."""
    out, fence = [], None
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
        elif fence in ("bash", "sh", "console", "shell") and line.strip():
            out.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return out


def test_the_list_is_the_readmes():
    shown = readme_commands()
    assert len(shown) == len(set(shown)), "a command is shown twice"
    assert shown == list(COMMANDS), (
        f"README shows commands not on the list: {[c for c in shown if c not in COMMANDS]}; "
        f"the list holds commands the README no longer shows: {[c for c in COMMANDS if c not in shown]}")


def test_the_two_quick_start_commands_are_unchanged():
    shown = readme_commands()
    assert 'pip install torch==2.13.0 -e ".[test,sweep]" && kselect run' in shown
    assert "python -m pytest -n auto" in shown


@pytest.mark.parametrize("shown", [c for c, how in COMMANDS.items() if isinstance(how, Run)])
def test_readme_command_runs_on_cpu(shown, tmp_path):
    how = COMMANDS[shown]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "KSELECT_DEBUG")}
    env["PATH"] = f"{Path(PY).parent}{os.pathsep}{env.get('PATH', '')}"  # this interpreter's `kselect`
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path, as on a CPU machine
    p = subprocess.run(["bash", "-c", how.cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == how.rc, f"{how.cmd}: exit {p.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    assert "nanobind" not in out, out[-3000:]  # an extension's leak report at exit (kselect/cli.py, gc.freeze)
    for pattern in how.shows:
        assert re.search(pattern, out), f"{how.cmd}: output lacks {pattern!r}\n{out[-3000:]}"
