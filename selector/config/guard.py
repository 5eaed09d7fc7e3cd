"""What may reach Hydra: checks on the conf/ tree and on command-line overrides.

Configs are data. Nothing in conf/ (overlays, rules, capabilities, config.yaml, ...) may name
code (`_target_`), touch Hydra's own settings (`hydra:` callbacks, search paths), or use
interpolations (`${oc.env:...}` would print the environment into a PR comment). Group and
overlay names are file names inside conf/: a safe charset, no `..`. Every YAML file is read
through `files.check_yaml_text` (size, depth and alias-expansion bounds) before Hydra loads it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..base import cache
from ..base.errors import KSelectError
from ..base.files import FileError, read_text, safe_name
from ..config.overlay_order import check_overlay_list

# Hydra settings a sweep may change from the command line (launcher choice, output dirs, jobs).
SWEEP_HYDRA_KEYS = ("hydra/launcher", "hydra/sweeper", "hydra.sweep.", "hydra.run.", "hydra.launcher.",
                    "hydra.sweeper.", "hydra.job.chdir")  # fmt: skip


# Data that reviewers read as text (rules, overlays, capabilities) holds no interpolation at all;
# no file holds a resolver (`${oc.env:X}`, `${now:...}`): configs never read the environment.
# Group options (platform/, model/, ...) may refer to another node, `${.hidden_size}` or
# `${model.hidden_size}` (the matrix composes them at their own package), and nothing else: once
# every such plain reference is taken out no `${` may be left, so neither a resolver nor a nested
# name (`${${model.name}:SECRET}` with model.name=oc.env is oc.env) gets through.
STRICT_DIRS = ("overlay", "rules", "capabilities", "conformance", "matrix")
PLAIN_REF = re.compile(r"\$\{\.*[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\}")


def plain_refs_only(value: str) -> bool:
    return "${" not in PLAIN_REF.sub("", value)


class ConfTreeError(KSelectError):
    """A file of conf/ that kselect refuses to compose (it names the file and the key)."""


def conf_files(conf_dir: Path | str) -> list[tuple[Path, str]]:
    """Every YAML file under conf_dir (sorted) with its content hash ("" where it cannot be read: the check
    names the problem)."""
    out = []
    for p in sorted(Path(conf_dir).rglob("*.y*ml")):
        try:
            out.append((p, cache.digest(p.read_bytes())))
        except OSError:
            out.append((p, ""))
    return out


def check_conf_tree(conf_dir: Path | str, files: list[tuple[Path, str]] | None = None) -> None:
    """Every YAML file under conf_dir checked, each once per content (cache.py): a file whose exact content
    (and name) passed these checks before, under this kselect, passes without being parsed again.
    files: conf_files(conf_dir), when the caller hashed them already."""
    root = Path(conf_dir)
    files = conf_files(root) if files is None else files
    code = cache.code_key()
    keys = [cache.digest("guard", code, str(p.relative_to(root)), h) if h else "" for p, h in files]
    tree = cache.digest("guard-tree", *keys)
    if tree in _PASSED or cache.read_entry("guard", tree) is True:
        _PASSED.add(tree)
        return
    for (p, _), key in zip(files, keys):
        if key and (key in _PASSED or cache.read_entry("guard", key) is True):
            _PASSED.add(key)
            continue
        _check_file(root, p)
        if key:
            _PASSED.add(key)
            cache.write_entry("guard", key, True)
    _PASSED.add(tree)
    cache.write_entry("guard", tree, True)


_PASSED: set[str] = set()  # keys (content hashes) that passed in this process


def _check_file(root: Path, p: Path) -> None:
    rel = p.relative_to(root)
    for part in rel.parts:
        if not part.startswith(".") or part in (".", ".."):
            safe_name(part.removesuffix(".yaml").removesuffix(".yml"), f"file {rel}")
    read_text(p, "a kselect config file")  # a dangling link or an oversized file, named
    data = cache.load_yaml_cached(p, "a kselect config file")  # parsed once a content: evidence reads it from there
    launcher = rel.parts[:2] == ("hydra", "launcher")
    strict = rel.parts[0] in STRICT_DIRS or rel == Path("config.yaml")
    for path, key, value in _walk(data):
        where = f"{p}: {'.'.join(path + [str(key)]) if key is not None else '.'.join(path) or '<root>'}"
        if key == "_target_" and not (launcher and isinstance(value, str) and value.startswith("hydra_plugins.")):
            raise ConfTreeError(
                f"{where}: _target_ {value!r} is not allowed; kselect configs are data and never name code "
                "(only conf/hydra/launcher/*.yaml may name a hydra_plugins launcher)"
            )
        if key == "hydra" and not path and rel.parts[0] != "hydra":
            raise ConfTreeError(f"{where}: a 'hydra' section is not allowed in kselect configs (Hydra callbacks, search paths)")
        if key == "callbacks" and path == ["hydra"]:
            raise ConfTreeError(f"{where}: hydra.callbacks is not allowed (it would run code)")
        if key == "defaults" and not path and strict and rel != Path("config.yaml"):
            raise ConfTreeError(f"{where}: a defaults list is not allowed in {rel.parts[0]}/ (data that reviewers read)")
        if path[:1] == ["defaults"] and rel.parts[0] != "hydra" and ("hydra" in str(key or "") + str(value) or ".." in str(key or "") + str(value)):
            raise ConfTreeError(f"{where}: defaults entry {value!r} is not allowed; allowed: options of kselect's own groups (no hydra/, no '..')")
        if isinstance(value, str) and "${" in value and (strict or not plain_refs_only(value)):
            raise ConfTreeError(
                f"{where}: interpolation {value!r} is not allowed here; allowed: the value itself, or in a group "
                "option (platform/, model/, ...) a plain reference to another key such as ${.hidden_size} "
                "(no resolvers such as oc.env, no nested ${...}; overlays, rules, capabilities, conformance and "
                "matrix files and config.yaml hold no interpolation at all)"
            )
        if isinstance(key, str) and "${" in key:
            raise ConfTreeError(f"{where}: interpolation in a key is not allowed")


def _walk(data: Any, path: list[str] | None = None) -> Iterable[tuple[list[str], Any, Any]]:
    path = path or []
    if isinstance(data, dict):
        for k, v in data.items():
            yield path, k, v
            yield from _walk(v, path + [str(k)])
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield path, None, v
            yield from _walk(v, path + [str(i)])


@functools.lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415

    return OverridesParser.create()


def check_overrides(overrides: Sequence[str], conf_dir: Path | str, hydra_keys: Sequence[str] = ()) -> None:
    """Refuse overrides that name files outside conf/, list overlays in an order that makes no
    sense (overlay_order.py), interpolate, or change Hydra's own settings (only `hydra_keys`
    prefixes are allowed: a sweep's launcher and dirs)."""
    from hydra.errors import HydraException  # noqa: PLC0415

    groups = {p.name for p in Path(conf_dir).iterdir() if p.is_dir()} | {"hydra"}
    parser = _parser()
    for text in overrides:
        if not isinstance(text, str):
            raise KSelectError(f"invalid config: override {text!r} is not a string")
        if "${" in text:
            raise KSelectError(
                f"invalid config: {text}: interpolations (${{...}}) are not allowed; write the value itself"
            )
        try:
            [ov] = parser.parse_overrides([text])
        except (HydraException, ValueError) as e:
            msg = " ".join(str(e).split("See https")[0].split())
            raise KSelectError(
                f"invalid config: {text}: not a Hydra override ({msg}); allowed: key=value, +key=value, ~key, group=option"
            ) from None
        key = ov.key_or_group
        if not key:
            raise KSelectError(f"invalid config: {text}: no key; allowed: key=value, +key=value, ~key, group=option")
        is_hydra = key.split(".")[0].split("/")[0] == "hydra"
        if is_hydra and not any(key == k.rstrip(".") or key.startswith(k) for k in hydra_keys):
            allowed = ", ".join(hydra_keys) if hydra_keys else "none here"
            raise KSelectError(f"invalid config: {text}: Hydra's own settings are not kselect config; allowed: {allowed}")
        if is_hydra and "/" not in key:
            continue
        if ".." in key or key.startswith("/"):
            raise KSelectError(f"invalid config: {text}: bad key {key!r}; keys name config fields (no '..', no leading '/')")
        if ov.package is not None and (not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,200}", ov.package) or ".." in ov.package):
            raise KSelectError(f"invalid config: {text}: bad package {ov.package!r}; allowed: group@dotted.key=option")
        group = key.split("/")[0]
        if group not in groups or "." in key:
            continue
        if ov.is_delete() and ov.value() is None:
            continue
        value = ov.value()
        if ov.is_sweep_override():
            if not hasattr(value, "list"):
                raise KSelectError(f"invalid config: {text}: a group takes a list of options to sweep, not a range")
            options = value.list
        else:
            options = [value]
        names = [n for opt in options for n in (opt if isinstance(opt, list) else [opt])]
        for v in names:
            if not isinstance(v, str):
                raise KSelectError(f"invalid config: {key}: bad option {v!r}; allowed: names of files in conf/{group}/")
            safe_name(v, key)
        for opt in options if group == "overlay" else []:
            opt = opt if isinstance(opt, list) else [opt]
            check_overlay_list(opt, conf_dir, f"[{','.join(opt)}]")


__all__ = ["ConfTreeError", "FileError", "SWEEP_HYDRA_KEYS", "check_conf_tree", "check_overrides", "conf_files"]
