"""Where a measurement came from: the project's own commit and dirty state, and tool versions.

    from kselect.provenance import provenance
    meta.update(provenance())   # {"commit": ..., "dirty": ..., "commit_source": ..., "versions": {...}}

The commit is kselect's, never that of a repository that merely encloses the tree (a copy under
another checkout, as on a lent GPU machine): `git -C <checkout>` is trusted only when the checkout
is the repository's top level. A tree made with `git archive` has no .git; it carries its commit
in `kselect/COMMIT` (`export-subst` in .gitattributes); else `KSELECT_COMMIT` from the
environment names it, as it does for a dirty checkout (a copied tree over an older HEAD). Otherwise
the commit is "unknown".
Versions come from the installed distributions' metadata (no imports, so no CUDA start-up).
"""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = ("kselect", "torch", "triton", "flash-attn-4", "flashinfer-python", "vllm", "transformers",
                 "hydra-core", "pydantic")  # fmt: skip


def _git(root: Path, *args: str) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def project_commit(root: Path = CHECKOUT) -> dict:
    """{"commit", "dirty", "commit_source"} of the kselect checkout at root."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is not None and Path(top).resolve() == root.resolve():
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        head = _git(root, "rev-parse", "HEAD")
        if status and os.environ.get("KSELECT_COMMIT"):
            # a dirty checkout whose copier names the commit of its tree: the lent GPU machine's copy keeps
            # an older HEAD under the session's newer working tree
            return {"commit": os.environ["KSELECT_COMMIT"], "dirty": None, "commit_source": "KSELECT_COMMIT",
                    "git_head": head}
        return {"commit": head, "dirty": bool(status), "commit_source": "git"}
    stamp = root / "kselect" / "COMMIT"
    text = stamp.read_text().strip() if stamp.is_file() else ""
    if text and not text.startswith("$Format"):
        return {"commit": text, "dirty": None, "commit_source": "git archive (kselect/COMMIT)"}
    if os.environ.get("KSELECT_COMMIT"):  # set by whoever copied the tree (bench/results/h200/*/README.md)
        return {"commit": os.environ["KSELECT_COMMIT"], "dirty": None, "commit_source": "KSELECT_COMMIT"}
    why = f"inside another repository ({top})" if top else "not a git checkout"
    return {"commit": "unknown", "dirty": None, "commit_source": why}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(root: Path = CHECKOUT) -> dict:
    import platform  # noqa: PLC0415

    return {**project_commit(root), "python": platform.python_version(), "versions": versions()}
