"""Bench and results headers record kselect's own commit, not that of a repository enclosing a copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kselect.provenance import project_commit, provenance

ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *a: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_own_checkout_copy_inside_another_repo_and_archive_stamp(tmp_path):
    outer = tmp_path / "outer"
    (outer / "copy" / "kselect").mkdir(parents=True)
    _git(outer, "init", "-q")
    (outer / "x").write_text("x")
    _git(outer, "add", "x")
    _git(outer, "commit", "-qm", "outer")
    copy = outer / "copy"
    shutil.copy(ROOT / "kselect" / "provenance.py", copy / "kselect")
    got = project_commit(copy)  # a copy under an enclosing repository: not its commit
    assert got["commit"] == "unknown" and "inside another repository" in got["commit_source"]
    (copy / "kselect" / "COMMIT").write_text("0123456789abcdef\n")  # what git archive writes (export-subst)
    assert project_commit(copy) == {"commit": "0123456789abcdef", "dirty": None, "commit_source": "git archive (kselect/COMMIT)"}
    _git(copy, "init", "-q")  # its own repository now
    _git(copy, "add", "kselect")
    _git(copy, "commit", "-qm", "own")
    own = project_commit(copy)
    assert own["commit"] == _git(copy, "rev-parse", "HEAD") and own["dirty"] is False and own["commit_source"] == "git"
    (copy / "kselect" / "provenance.py").write_text("# edited\n")
    assert project_commit(copy)["dirty"] is True


def test_versions_are_recorded():
    p = provenance()
    assert p["versions"]["hydra-core"] and p["versions"]["pydantic"] and "torch" in p["versions"] and p["python"]


def test_a_dirty_copy_names_the_commit_its_copier_gives(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "kselect").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "f").write_text("a")
    _git(repo, "add", "f")
    _git(repo, "commit", "-qm", "base")
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("KSELECT_COMMIT", "e74102f")
    assert project_commit(repo) == {"commit": head, "dirty": False, "commit_source": "git"}  # clean: git's
    (repo / "f").write_text("b")  # a newer working tree copied over an older HEAD (the lent GPU machine)
    got = project_commit(repo)
    assert got["commit"] == "e74102f" and got["commit_source"] == "KSELECT_COMMIT" and got["git_head"] == head
    monkeypatch.delenv("KSELECT_COMMIT")
    assert project_commit(repo) == {"commit": head, "dirty": True, "commit_source": "git"}
