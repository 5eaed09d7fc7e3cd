"""The two sides of `kselect diff` from its config (kselect/commands/diff.py's DiffArgs): the repository whose conf/
they read, each side's conf tree (the worktree or a git revision), overlays, objective and rules option."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from ..base.errors import KSelectError
from ..base.files import group_options
from ..config.compose import CONF_DIR
from ..config.overlay_order import check_overlays
from .diff_sources import Source, default_rules, git_conf, side_rules


def default_repo(uses_git: bool, conf_rel: str) -> Path:
    """The repository whose conf/ the diff reads: this source checkout (an editable install or a
    checkout on PYTHONPATH); from a wheel, the installed configs, unless a side names git:<rev>,
    which reads conf/ from the git checkout holding the current directory (the user's clone)."""
    if (CONF_DIR.parent / "pyproject.toml").is_file() or not uses_git:
        return CONF_DIR.parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        top = None
    if top is not None and top.returncode == 0 and (Path(top.stdout.strip()) / conf_rel).is_dir():
        return Path(top.stdout.strip())
    raise KSelectError(
        f"diff: a git:<rev> side reads {conf_rel}/ from a git checkout of kselect, but kselect is installed from a "
        f"wheel (its configs: {CONF_DIR}) and the current directory is not inside a git checkout with {conf_rel}/; "
        "run the command inside your clone, or pass repo=<path of the clone>")


def source(side: str, args, repo: Path, stack: ExitStack, conf_rel: str, name_conf: bool = False) -> Source:
    """One side (its conf and overlays); its label names the conf only when the sides read different ones."""
    conf, ov = args.conf, tuple(args.overlay)
    label = f"{conf}:[{','.join(ov)}]" if name_conf else f"[{','.join(ov)}]"
    if conf == "worktree":
        return Source(label, repo / conf_rel, check_overlays(f"diff: {side}.overlay", ov, repo / conf_rel))
    if conf.startswith("git:") and conf[4:]:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kselect-diff-")))
        conf_dir = git_conf(repo, conf[4:], tmp, conf_rel)
        return Source(label, conf_dir, check_overlays(f"diff: {side}.overlay ({conf})", ov, conf_dir))
    raise KSelectError(f"diff: {side}.conf={conf!r}; allowed: worktree, git:<rev>")


def sides(cfg, stack: ExitStack) -> tuple[Path, Source, Source]:
    """The repository and the two sides' conf trees and overlays; a git revision's tree lives as long as `stack`."""
    uses_git = any(str(side.conf).startswith("git:") for side in (cfg.a, cfg.b))
    repo = Path(cfg.repo).resolve() if cfg.repo else default_repo(uses_git, cfg.conf_path)
    if not repo.is_dir():
        raise KSelectError(f"diff: repo={cfg.repo!r} is not a directory")
    two = cfg.a.conf != cfg.b.conf
    return repo, source("a", cfg.a, repo, stack, cfg.conf_path, two), source("b", cfg.b, repo, stack, cfg.conf_path, two)


def with_rules(cfg, a: Source, b: Source, matrix_rules: str | None) -> tuple[Source, Source, list[str]]:
    """Each side with its objective and its rules option (its own, the diff's, the matrix's, else its conf tree's
    default: a note on stderr says so), and the rules each runs; where those differ, the labels say which."""
    out = []
    for name, src, args in (("a", a, cfg.a), ("b", b, cfg.b)):
        have = group_options(src.conf_dir, "objective")
        if args.objective and args.objective not in have:
            raise KSelectError(f"diff: {name}.objective={args.objective}: the {name} side ({src.label}) has no objective "
                               f"{args.objective!r}; allowed: {', '.join(have) or 'none'}")
        rules, note = side_rules(name, src.label, src.conf_dir, args.rules or cfg.rules, matrix_rules,
                                 "" if args.rules else "rules")
        if note:
            print(note, file=sys.stderr)
        out.append(replace(src, objective=args.objective, rules=rules, own_default_rules=bool(note)))
    ran = [s.rules or default_rules(s.conf_dir) for s in out]
    if ran[0] != ran[1]:  # the labels say which rules each side ran
        out = [replace(s, label=f"{s.label} rules={r}") for s, r in zip(out, ran)]
    return out[0], out[1], ran
