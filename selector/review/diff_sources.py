"""The two sides of a review diff: an overlay set, the worktree's conf/, or conf/ at a git
revision (read with `git archive` into a temporary directory)."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import KSelectError
from ..base.files import group_options
from ..review.configs import default_rules


@dataclass(frozen=True)
class Source:
    label: str
    conf_dir: Path
    overlays: tuple[str, ...]
    objective: str = ""  # "": as composed (conf/config.yaml: vllm); else objective=<name> for every cell
    rules: str | None = None  # the rules option of this side's cells (None: the matrix's declared one)
    own_default_rules: bool = False  # compose with this conf tree's default rules (it lacks the matrix's)


def side_rules(side: str, label: str, conf_dir: Path, named: str, matrix_rules: str | None,
               key: str = "") -> tuple[str | None, str]:
    """The rules option one side runs, and a note when it is not the matrix's. A rules option the
    user names must exist in that side's conf tree (exit 2 otherwise). Without one, a side takes
    the matrix's declared rules if its tree has them, else its own tree's default (a revision from
    before a rules option existed composes as it did then); the note says so. `key`: the option as the user wrote
    it (`rules`, for both sides), default `<side>.rules`."""
    opts = group_options(conf_dir, "rules")
    if named:
        if named not in opts:
            raise KSelectError(
                f"diff: {key or side + '.rules'}={named}: the {side} side ({label}) has no rules option {named!r}; its conf/rules has "
                f"{', '.join(opts) or 'none'}. Name one per side, e.g. {side}.rules={default_rules(conf_dir) or (opts or ['?'])[0]}"
            )
        return named, ""
    if matrix_rules is None or matrix_rules in opts:
        return matrix_rules, ""
    own = default_rules(conf_dir)
    return None, (f"diff: the {side} side ({label}) has no rules option {matrix_rules!r} (the matrix's); it runs its own "
                  f"default, rules={own} (name one with {side}.rules=..., one of {', '.join(opts) or 'none'})")


_REV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./~^@{}+-]{0,199}$")


def git_conf(repo: Path, rev: str, dest: Path, conf_rel: str = "conf") -> Path:
    """Extract `<rev>:conf` into dest (git archive) and return the conf directory there.

    The revision never reaches git as an option: it must look like a revision (no leading '-',
    no spaces), is resolved with `git rev-parse --verify` to a commit, and only that sha is
    passed on, with the path after `--`."""
    if not _REV.fullmatch(rev) or ".." in rev:
        raise KSelectError(
            f"diff: git revision {rev!r} is not allowed; allowed: a branch, tag, sha or rev such as HEAD~1 "
            "(letters, digits and _ . / ~ ^ @ { } + -, not starting with '-', no '..')"
        )
    conf_rel = check_conf_rel(conf_rel)
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if sha.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40,64}", sha.stdout.strip()):
            raise KSelectError(f"diff: git archive {rev}: not a commit in {repo} (git rev-parse --verify found none)")
        p = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha.stdout.strip(), "--", conf_rel],
                           capture_output=True, timeout=300)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        raise KSelectError(f"diff: git:{rev}: git could not run in {repo} ({e.__class__.__name__}: {e})") from None
    if p.returncode != 0:
        raise KSelectError(f"diff: git:{rev} conf_path={conf_rel}: git archive failed in {repo}: {p.stderr.decode(errors='replace').strip()}")
    try:
        with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise KSelectError(f"diff: git:{rev}: could not extract {conf_rel} ({e})") from None
    return dest / conf_rel


def check_conf_rel(conf_rel: str) -> str:
    """`conf_path=` names a folder of the repository: relative, safe parts, no '..'."""
    parts = conf_rel.split("/")
    if not conf_rel or conf_rel.startswith(("/", "-")) or any(not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", x) or x == ".." for x in parts):
        raise KSelectError(f"diff: conf_path={conf_rel!r}; allowed: a relative folder of the repository (letters, digits, _ . -; no '..', not starting with '-' or '/')")
    return conf_rel
