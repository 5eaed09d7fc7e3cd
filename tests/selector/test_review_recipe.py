"""The review recipe (kselect/measurement/review/conf_diff.sh, called by .github/workflows/kselect-diff.yml and
the pre-commit hook) on a throwaway git repository: a conf/ change against its base."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from kselect.selector.api import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "kselect" / "measurement" / "review" / "conf_diff.sh"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True)


def recipe(repo: Path, *args: str, summary: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KSELECT": f"{sys.executable} -m kselect"}
    env.pop("GITHUB_BASE_REF", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    if summary is not None:
        env["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run(["bash", str(SCRIPT), *args, "matrix=smoke"], cwd=repo, capture_output=True, text=True,
                          timeout=300, env=env)


def test_conf_change_against_its_base(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(CONF_DIR, repo / "conf", ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "conf")
    git(repo, "commit", "-qm", "conf")
    p = recipe(repo)
    assert p.returncode == 0, p.stderr
    assert "No cell changed" in p.stdout
    # a PR branch changes TRITON_ATTN's kernel blocks (the seed story's multimodal FP8 cells on SM90 run it)
    git(repo, "checkout", "-qb", "pr")
    caps = repo / "conf" / "capabilities" / "default.yaml"
    text = caps.read_text()
    old = "  kernel_block_sizes: [{multiple_of: 16}]"
    at = text.index(old, text.index("TRITON_ATTN:\n"))
    caps.write_text(text[:at] + "  kernel_block_sizes: [{multiple_of: 32}]" + text[at + len(old):])
    git(repo, "commit", "-qam", "TRITON_ATTN blocks")
    summary = tmp_path / "summary.md"
    p = recipe(repo, "main", summary=summary)
    assert p.returncode == 1, p.stderr  # check=true: something moved
    # a capability reaches every rules option: one diff each (the seed story's included)
    assert p.stdout.startswith("**kselect review: conf/ files changed: capabilities/default.yaml; rules options they "
                               "reach: post_pr52987, vllm_0_32_0, vllm_0_33_0, vllm_0_34_0; 4 diffs, cells changed**")
    assert "#### rules=post_pr52987 over matrix smoke" in p.stdout and "**kselect diff git:" in p.stdout
    assert "sliding_window: kernel block 16 -> 32, kv block 16 -> 32" in p.stdout
    assert "`sm90 × kv=fp8 × spec=none × multimodal=true`" in p.stdout
    published = summary.read_text()
    assert published.startswith("### kselect: what this conf/ change does (base main = ") and p.stdout.strip() in published
    # a bad base revision: exit 2, one line
    bad = recipe(repo, "nope")
    assert bad.returncode == 2 and "base revision 'nope' not found" in bad.stderr
    # a fresh clone has no local `main`, only origin/main: the README's `conf_diff.sh main` still works
    subprocess.run(["git", "clone", "-q", str(repo), str(tmp_path / "clone")], check=True, capture_output=True)
    p = recipe(tmp_path / "clone", "main")
    assert p.returncode == 1, p.stderr
    assert "sliding_window: kernel block 16 -> 32, kv block 16 -> 32" in p.stdout


def test_workflow_and_hook_call_the_script():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "kselect-diff.yml").read_text())
    assert wf[True]["pull_request"]["paths"] == ["conf/**"]  # YAML 1.1 reads the key `on` as True
    steps = wf["jobs"]["conf-diff"]["steps"]
    assert any("kselect/measurement/review/conf_diff.sh" in s.get("run", "") for s in steps)
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["entry"] == "kselect/measurement/review/conf_diff.sh" and hook["files"] == "^conf/"
    assert os.access(SCRIPT, os.X_OK)


def test_an_overlay_of_the_default_release_fails_the_review(tmp_path):
    """The reviewer's journey (#51): `default_block_size: 64 -> 32` in the default release's overlay. The review
    check reaches that release (and no other) and lists the cells that moved; exit 1."""
    repo = tmp_path / "repo"
    shutil.copytree(CONF_DIR, repo / "conf", ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "conf")
    git(repo, "commit", "-qm", "conf")
    ov = repo / "conf" / "overlay" / "vllm_0_34_0.yaml"
    text = ov.read_text()
    assert text.count("    default_block_size: 64\n") == 1
    ov.write_text(text.replace("    default_block_size: 64\n", "    default_block_size: 32\n"))
    p = recipe(repo)  # the pre-commit hook's call: the uncommitted change against HEAD
    assert p.returncode == 1, p.stderr
    assert p.stdout.startswith("**kselect review: conf/ files changed: overlay/vllm_0_34_0.yaml; rules options they "
                               "reach: vllm_0_34_0; 1 diffs, cells changed**"), p.stdout[:400]
    assert "#### rules=vllm_0_34_0 over matrix smoke" in p.stdout
    assert "over matrix smoke (48 cells): 16 changed (16 selection" in p.stdout
    assert "| 16 | `sm90 × gemma4_tiny`<br>`sm90 × kv=auto` | all groups: kernel block 64 -> 32, kv block 64 -> 32" in p.stdout
    assert "cache block 64 -> 32" in p.stdout
