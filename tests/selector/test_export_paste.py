"""`output=vllm` is a command you can paste (#49 item 5, #51): pasted into bash, it hands `vllm` exactly the intended
argv, for every string the fuzz generator makes in every exported field (fuzz_classes.shell_string), and
`shlex.split` of the text (its comment lines dropped) is that argv. A stand-in `vllm` on PATH records what it got."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

from fuzz_classes import SHELL_EXAMPLES, shell_string
from kselect.selector.api import compose, resolve
from kselect.selector.base.errors import KSelectError
from kselect.selector.export.formats import render

STAND_IN = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["VLLM_ARGV_OUT"], "w") as f:
    json.dump(sys.argv[1:], f)
"""


def stand_in_vllm(folder: Path) -> dict:
    """A `vllm` on PATH that records its argv as JSON; the environment that finds it first."""
    (folder / "bin").mkdir(exist_ok=True)
    exe = folder / "bin" / "vllm"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "VLLM_ARGV_OUT": str(folder / "argv.json"), "HOME": str(folder / "home")}


def paste(text: str, folder: Path) -> list[str]:
    """Run the export as a user pasting it into bash would, in an empty folder; the argv `vllm` received. Nothing but
    that record may appear (a command substitution or redirection that ran would leave a file)."""
    run = folder / "cwd"
    run.mkdir(parents=True)
    p = subprocess.run(["bash", "-c", text], cwd=run, env=stand_in_vllm(folder), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, (text, p.stderr)
    assert not any(run.iterdir()), f"pasting ran something: {sorted(x.name for x in run.iterdir())}\n{text}"
    return ["vllm", *json.loads((folder / "argv.json").read_text())]


def argv_of(text: str) -> list[str]:
    return shlex.split(text, comments=True)


# ---------------------------------------------------------------- one selection, every string in every field

MTP = ("platform=sm90", "model=gemma4_31b", "spec_decode=mtp")
_BASE: dict = {}


def mtp_export(checkpoint: str, drafter: str) -> str:
    """output=vllm of an MTP selection whose checkpoint and drafter checkpoint are the given strings (the config is
    composed and resolved once; the strings are set on the validated config, as a Hydra override would set them)."""
    if not _BASE:
        cfg = compose(list(MTP))
        _BASE.update(cfg=cfg, sel=resolve(cfg))
    cfg = _BASE["cfg"]
    model = cfg.model.model_copy(update={"checkpoint": checkpoint,
                                         "drafter": cfg.model.drafter.model_copy(update={"checkpoint": drafter})})
    return render(_BASE["sel"], "vllm", cfg=cfg.model_copy(update={"model": model}))


def intended(checkpoint: str) -> list[str]:
    """The argv the MTP export means (its JSON compared as data, separately)."""
    return ["vllm", "serve", checkpoint, "--dtype", "bfloat16", "--kv-cache-dtype", "auto", "--speculative-config",
            "<json>", "--language-model-only"]


def check_argv(argv: list[str], checkpoint: str, drafter: str) -> None:
    spec = json.loads(argv[8])
    assert [*argv[:8], "<json>", *argv[9:]] == intended(checkpoint)
    assert spec == {"method": "mtp", "model": drafter, "num_speculative_tokens": 4}


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(checkpoint=shell_string, drafter=shell_string)
@example(checkpoint="$(touch X)", drafter="a'b")
@example(checkpoint="x\n# y\ntouch X", drafter="`touch X`")
def test_every_generated_string_reaches_vllm_as_one_argument(checkpoint, drafter, tmp_path_factory):
    text = mtp_export(checkpoint, drafter)
    check_argv(argv_of(text), checkpoint, drafter)
    check_argv(paste(text, tmp_path_factory.mktemp("paste")), checkpoint, drafter)


@pytest.mark.parametrize("s", SHELL_EXAMPLES)
def test_shlex_split_is_the_argv(s):
    """Each example as the checkpoint and the drafter: shlex alone, no shell (fast, every example)."""
    check_argv(argv_of(mtp_export(s, s)), s, s)


# ---------------------------------------------------------------- through the real command line


def kselect(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kselect.cli", "select", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_the_issues_two_strings_through_hydra_come_out_inert(tmp_path):
    """`model.checkpoint="$(touch X)"` and a `'` in model.drafter.checkpoint, as Hydra overrides (#49)."""
    p = kselect(*MTP, 'model.checkpoint="$(touch X)"', "model.drafter.checkpoint=\"org/it's\"", "output=vllm", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    check_argv(paste(p.stdout, tmp_path / "p"), "$(touch X)", "org/it's")
    assert not (tmp_path / "X").exists()


def test_a_config_folder_is_the_model_argument(tmp_path):
    """model=hf model.hf_config=<folder>: vLLM loads that folder (a name a shell would expand), text-only: no
    --language-model-only; a preset names its Hugging Face repository."""
    folder = tmp_path / "my model $(touch Y);x"
    folder.mkdir()
    hf = compose(["model=llama3_1_8b"]).model.hf_config
    (folder / "config.json").write_text(json.dumps({**hf, "torch_dtype": "bfloat16"}))
    cfg = compose(["platform=sm90", "model=hf", f"model.hf_config='{folder}'"])
    text = render(resolve(cfg), "vllm", cfg=cfg)
    want = ["vllm", "serve", str(folder), "--dtype", "bfloat16", "--kv-cache-dtype", "auto"]
    assert argv_of(text) == want and paste(text, tmp_path / "p") == want
    preset = compose(["platform=sm90", "model=llama3_1_8b"])
    assert argv_of(render(resolve(preset), "vllm", cfg=preset))[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]


def test_a_multimodal_architecture_in_text_mode_gets_language_model_only():
    cfg = compose(["platform=sm90", "model=gemma4_31b", "model.checkpoint=google/gemma-4-31B-it"])
    assert argv_of(render(resolve(cfg), "vllm", cfg=cfg))[-1] == "--language-model-only"
    vision = compose(["platform=sm90", "model=gemma4_31b", "model.multimodal=true"])
    assert "--language-model-only" not in argv_of(render(resolve(vision), "vllm", cfg=vision))


def test_a_backend_vllm_lacks_is_refused_not_exported():
    cfg = compose(["platform=sm90", "model=llama3_1_8b", "attention.backend=TORCH_REFERENCE"])
    with pytest.raises(KSelectError) as e:
        render(resolve(cfg), "vllm", cfg=cfg)
    assert "TORCH_REFERENCE" in str(e.value) and "vLLM has no such backend" in str(e.value) and "\n" not in str(e.value)
