"""Which overlay lists make sense: overlays declare what they revert or replace, as data.

An overlay file may declare, next to its `overlays:` and `overlay_bases:` entries,

    overlay_relations:
      pr52987: {reverts: [pr48666]}    # undoes pr48666: listed after it
      pr53175: {replaces: [pr48666]}   # an alternative to pr48666 (a re-land): never on top of it

and an overlay list (`overlay=[a,b,...]`, applied in order) is refused when
- it repeats an overlay;
- an overlay reverts one the list does not apply before it (`[pr52987]`, `[pr52987,pr48666]`);
- an overlay replaces one that is still applied, before it and not reverted in between, or
  after it (`[pr48666,pr53175]`, `[pr53175,pr48666]`);
- two overlays set the same key to different values and the later one declares no relation
  that covers it: it reverts or replaces the earlier one, or replaces what the earlier one
  reverts (#53175 re-enables what the #52987 revert of #48666 switched back).
So `[pr48666]`, `[pr48666,pr52987]` (the change and its revert), `[pr53175]` and
`[pr48666,pr52987,pr53175]` (merge, revert, re-land) compose; the other orders do not.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import KSelectError
from ..base.files import SAFE_NAME, group_options, load_yaml

BOOKKEEPING = ("overlays", "overlay_bases", "overlay_relations")  # what an overlay says about itself
VERBS = ("reverts", "replaces")
ALLOWED_DECL = "overlay_relations: {NAME: {reverts: [overlay, ...], replaces: [overlay, ...]}} (keyed by the overlay's own name)"


@dataclass(frozen=True)
class OverlayDecl:
    name: str
    reverts: tuple[str, ...]
    replaces: tuple[str, ...]
    writes: dict[str, Any]  # dotted leaf key -> value the overlay sets


def check_overlays(key: str, names, conf_dir: Path) -> tuple[str, ...]:
    """`key=[names]` (a.overlay, b.overlay, overlay) names overlays this conf tree has (conf/overlay/*.yaml); exit 2
    naming the key as the user wrote it, not the compose it would become."""
    names = tuple(names)
    have = group_options(conf_dir, "overlay")
    bad = [n for n in names if n not in have]
    if bad:
        raise KSelectError(f"{key}=[{','.join(names)}]: no overlay {', '.join(map(repr, bad))} in {Path(conf_dir) / 'overlay'}; "
                           f"allowed: {', '.join(have) or 'none'}")
    return names


def check_overlay_list(names: Sequence[str], conf_dir: Path | str, spelled: str) -> None:
    """Raise KSelectError naming the overlays, the key and what is allowed; `spelled` is the
    list as the user wrote it."""
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise KSelectError(
            f"invalid config: overlay: {spelled} repeats {', '.join(dups)}; allowed: each overlay at most once "
            "(an overlay applied twice re-applies its rules after the ones in between, which the reported "
            "overlay set would not show)"
        )
    if not _tree_declares_relations(Path(conf_dir) / "overlay"):
        return  # a conf tree from before overlay_relations (a diff's git:<rev> side): its own rules then
    decls = [_decl(Path(conf_dir) / "overlay" / f"{n}.yaml", n) for n in names]
    applied: list[OverlayDecl] = []
    for i, d in enumerate(decls):
        if d is None:
            continue  # no such file: Hydra's compose names the missing option
        _check_relations(d, applied, [x.name for x in decls[i + 1 :] if x is not None], spelled)
        for a in applied:
            _check_keys(a, d, spelled)
        applied.append(d)


def _check_relations(d: OverlayDecl, before: list[OverlayDecl], later: list[str], spelled: str) -> None:
    order = [x.name for x in before]
    for target in d.reverts:
        if target not in order:
            raise KSelectError(
                f"invalid config: overlay: {spelled}: {d.name} reverts {target}, which the list does not apply "
                f"before it; allowed: {target} earlier in the list (e.g. overlay=[{target},{d.name}]), or leave "
                f"{d.name} out (a revert of nothing changes nothing)"
            )
    for target in d.replaces:
        still = target in order and not any(target in x.reverts for x in before[order.index(target) + 1 :])
        if still:
            raise KSelectError(
                f"invalid config: overlay: {spelled}: {d.name} replaces {target}, which is still applied before "
                f"it; allowed: one of the two (overlay=[{d.name}] or overlay=[{target}]), or {target} reverted "
                f"before {d.name} by an overlay that declares 'reverts: [{target}]'"
            )
        if target in later:
            raise KSelectError(
                f"invalid config: overlay: {spelled}: {d.name} replaces {target}, which comes after it; "
                f"allowed: one of the two (overlay=[{d.name}] or overlay=[{target}])"
            )


def _check_keys(a: OverlayDecl, b: OverlayDecl, spelled: str) -> None:
    """a comes before b in the list."""
    if a.name in b.reverts or a.name in b.replaces or set(b.replaces) & set(a.reverts):
        return
    for key, vb in b.writes.items():
        if key in a.writes and a.writes[key] != vb:
            raise KSelectError(
                f"invalid config: overlay: {spelled}: {a.name} and {b.name} both set {key} "
                f"({a.writes[key]!r}, then {vb!r}) and {b.name} declares no relation to {a.name}; allowed: one "
                f"of the two, or the later one declaring it (in conf/overlay/{b.name}.yaml: overlay_relations: "
                f"{{{b.name}: {{reverts: [{a.name}]}}}} for a revert, {{replaces: [{a.name}]}} for an alternative)"
            )


@functools.lru_cache(maxsize=64)
def _tree_declares_relations(overlay_dir: Path) -> bool:
    """Trees written before overlay_relations existed (e.g. `kselect diff a.conf=git:<old rev>`) had
    no order rules: their lists are checked for repeats only, and stderr says so once per tree."""
    files = sorted(overlay_dir.glob("*.yaml")) if overlay_dir.is_dir() else []
    if not files or any("overlay_relations" in _raw(f) for f in files):
        return True
    print(f"note: {overlay_dir} declares no overlay_relations (a conf tree from before they existed): overlay "
          "lists composed on it are checked for repeats only, not for order or contradictions", file=sys.stderr)
    return False


def _raw(path: Path) -> dict:
    data = load_yaml(path, "an overlay file")
    return data if isinstance(data, dict) else {}


def _decl(path: Path, name: str) -> OverlayDecl | None:
    if not path.is_file():
        return None
    st = path.stat()
    return _read(path, name, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read(path: Path, name: str, size: int, mtime: int) -> OverlayDecl:
    data = load_yaml(path, "an overlay file")
    if not isinstance(data, dict):
        return OverlayDecl(name, (), (), {})  # the schema names what is wrong with it after compose
    rel = data.get("overlay_relations", {})
    if not isinstance(rel, dict) or set(rel) - {name}:
        raise KSelectError(f"invalid config: {path}: overlay_relations {rel!r}; allowed: {ALLOWED_DECL.replace('NAME', name)}")
    mine = rel.get(name) or {}
    if not isinstance(mine, dict) or set(mine) - set(VERBS):
        raise KSelectError(f"invalid config: {path}: overlay_relations.{name} {mine!r}; allowed: {ALLOWED_DECL.replace('NAME', name)}")
    verbs = {}
    for verb in VERBS:
        targets = mine.get(verb, [])
        if not isinstance(targets, list) or not all(isinstance(t, str) and SAFE_NAME.fullmatch(t) and t != name for t in targets):
            raise KSelectError(
                f"invalid config: {path}: overlay_relations.{name}.{verb} {targets!r}; allowed: a list of other overlay names"
            )
        verbs[verb] = tuple(targets)
    writes = {k: v for k, v in _leaves({k: v for k, v in data.items() if k not in BOOKKEEPING})}
    return OverlayDecl(name, verbs["reverts"], verbs["replaces"], writes)


def _leaves(data: Any, prefix: str = ""):
    if isinstance(data, dict) and data:
        for k, v in data.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data
