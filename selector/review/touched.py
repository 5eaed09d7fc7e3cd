"""What a change to conf/ can move, and so what the review check diffs (`kselect diff review=true`).

A rules option's files are its chain (conf/rules/<root>.yaml, each release manifest, each release
overlay: selector/config/releases.py) and the overlays written for it (`overlay_bases`). Every other
file of conf/ (capabilities, models, platforms, measured data, config.yaml, ...) reaches every rules
option; conf/matrix/ only declares the cells, which both sides read from the worktree.

The plan: each touched rules option over the matrices that declare `review: true`. A review matrix
that names the option (`rules: post_pr52987`, the seed story) runs under it with each overlay set it
lists; a review matrix without `rules:` (the Gemma-4 `default` matrix, `models`) runs under every
touched option that no review matrix names (the releases).
"""

from __future__ import annotations

import filecmp
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import KSelectError
from ..base.files import load_yaml
from ..config.releases import chain
from ..review.cells import MatrixSpec, load_matrix

OWN_DIRS = ("rules", "overlay")  # files that belong to some rules options only
NOT_SELECTION = ("matrix",)  # cells, not selections: read from the worktree by both sides


@dataclass(frozen=True)
class Run:
    matrix: MatrixSpec
    rules: str
    overlays: tuple[str, ...]

    @property
    def title(self) -> str:
        ov = f", overlays [{','.join(self.overlays)}]" if self.overlays else ""
        return f"rules={self.rules} over matrix {self.matrix.name}{ov}"


def changed_files(conf_a: Path, conf_b: Path) -> list[str]:
    """Paths (relative to conf/) that differ between two conf trees, added and removed included."""
    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}

    fa, fb = files(conf_a), files(conf_b)
    both = fa & fb
    same = {f for f in both if filecmp.cmp(conf_a / f, conf_b / f, shallow=False)}
    return sorted((fa | fb) - same)


def _own_files(conf: Path, name: str) -> tuple[set[str], set[str]]:
    """The files of rules option `name` in one conf tree: (its chain, the overlays written for it)."""
    try:
        root, manifests = chain(conf, name)
    except KSelectError:
        return {f"rules/{name}.yaml"}, set()
    own = {f"rules/{root}.yaml"} | {f"rules/{m['name']}.yaml" for m in manifests}
    own |= {f"overlay/{ov}.yaml" for m in manifests for ov in m["overlays"]}
    written = set()
    for p in (conf / "overlay").glob("*.yaml"):
        data = load_yaml(p, "an overlay file")
        if p.stem in _release_overlays(conf):
            continue  # a release's own step (vllm_0_34_0 on vllm_0_33_0): it belongs to the newer release
        if isinstance(data, dict) and name in ((data.get("overlay_bases") or {}).values()):
            written.add(f"overlay/{p.name}")
    return own, written


def _release_overlays(conf: Path) -> set[str]:
    out = set()
    for p in (conf / "rules").glob("*.yaml"):
        data = load_yaml(p, "a rules file")
        rel = data.get("release") if isinstance(data, dict) else None
        if isinstance(rel, dict):
            out |= {str(o) for o in rel.get("overlays") or []}
    return out


def touched_rules(conf_a: Path, conf_b: Path, changed: list[str]) -> dict[str, frozenset[str] | None]:
    """The rules options (of either tree) whose selections the changed files can move: name -> None where
    its own rules move (every overlay set), else the overlays written for it that changed (those sets only)."""
    names = sorted({p.stem for c in (conf_a, conf_b) for p in (c / "rules").glob("*.yaml")})
    if any(f.split("/")[0] not in OWN_DIRS + NOT_SELECTION for f in changed):
        return dict.fromkeys(names)
    out: dict[str, frozenset[str] | None] = {}
    for name in names:
        chain_files, for_it = set(), set()
        for conf in (conf_a, conf_b):
            if (conf / "rules" / f"{name}.yaml").is_file():
                c, w = _own_files(conf, name)
                chain_files, for_it = chain_files | c, for_it | w
        if chain_files & set(changed):
            out[name] = None
        elif for_it & set(changed):
            out[name] = frozenset(Path(f).stem for f in for_it & set(changed))
    return out


def review_matrices(conf: Path, named: str = "") -> list[MatrixSpec]:
    """`named` (one matrix), else every matrix of conf/matrix/ that declares `review: true`."""
    if named:
        return [load_matrix(named, conf)]
    specs = [load_matrix(p.stem, conf) for p in sorted((conf / "matrix").glob("*.yaml"))]
    return [s for s in specs if s.review]


def plan(rules: dict[str, frozenset[str] | None], matrices: list[MatrixSpec]) -> list[Run]:
    """The diffs to run: see the module docstring. An overlay set runs where the option's own rules
    moved or it holds a changed overlay."""
    declared = {m.rules for m in matrices if m.rules}
    runs = []
    for name, overlays in rules.items():
        for m in matrices:
            if m.rules == name:
                runs += [Run(m, name, tuple(ov)) for ov in m.overlays if overlays is None or overlays & set(ov)]
            elif m.rules is None and name not in declared and overlays is None:
                runs.append(Run(m, name, ()))
    return runs
