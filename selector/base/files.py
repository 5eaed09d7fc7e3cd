"""Reading and writing files safely: bounded YAML, atomic writes, safe names.

Every file kselect writes goes through `atomic_write` (a temp file in the same directory, fsync,
rename), so a killed process leaves the old file or the new one, never a truncated one. Every
YAML file kselect reads itself goes through `load_yaml`: bounded in size and in aliases (a
497-byte alias bomb expands to gigabytes once a consumer copies it), safe loader only.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..base.errors import KSelectError
from .reading import FileError, check_lengths, is_special, short
from .reading import read_text as _read_checked

MAX_YAML_BYTES = 4 << 20  # the largest committed conf file is ~25 KB
MAX_YAML_NODES = 200_000  # after alias expansion; the largest committed file has ~3,000
MAX_YAML_DEPTH = 32
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def safe_name(name: str, key: str) -> str:
    """A name that becomes a file name inside conf/ (group option, overlay, gpu model)."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or ".." in name:
        raise KSelectError(
            f"invalid config: {key}: bad name {name!r}; allowed: letters, digits, '_', '-', '.' "
            "(at most 64, no '..', no '/'), naming a file inside conf/"
        )
    return name


# libyaml's safe loader where PyYAML was built with it (the same YAML subset and safety; ~10x faster
# on the 200 KB perf and conformance files, which the pure-Python loader parsed in seconds)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def group_options(conf_dir: Path | str, group: str) -> list[str]:
    """The options of a config group: the names of conf_dir/<group>/*.yaml, sorted."""
    return sorted(p.stem for p in (Path(conf_dir) / group).glob("*.yaml"))


def check_yaml_text(text: str, where: str) -> None:
    """Refuse YAML that is too large, too deep or expands (through aliases) past a bound, before
    building any Python object from it."""
    if len(text) > MAX_YAML_BYTES:
        raise FileError(f"{where}: {len(text)} bytes; allowed: at most {MAX_YAML_BYTES} bytes of YAML")
    depth, nodes, aliases = 0, 0, False
    try:
        for ev in yaml.parse(text, Loader=_LOADER):  # events: linear, no recursion
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                nodes += 1
                if depth > MAX_YAML_DEPTH:
                    raise FileError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels; allowed: at most {MAX_YAML_DEPTH}")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(ev, yaml.ScalarEvent):
                nodes += 1
            elif isinstance(ev, yaml.AliasEvent):
                aliases = True
        # without an alias the expanded size is the node count; with one, count it over the shared nodes
        root = yaml.compose(text, Loader=_LOADER) if aliases else None  # aliases stay shared nodes here
    except yaml.YAMLError as e:
        raise FileError(f"{where}: not valid YAML ({_yaml_msg(e)})") from None
    size = _expanded_size(root, {}) if root is not None else nodes
    if size > MAX_YAML_NODES:
        raise FileError(
            f"{where}: expands to more than {MAX_YAML_NODES} YAML nodes through aliases (*name); "
            f"allowed: at most {MAX_YAML_NODES} (an alias bomb?)"
        )


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes after every alias is expanded (memoized on the shared node objects)."""
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    memo[id(node)] = MAX_YAML_NODES + 1  # a cycle counts as unbounded
    if isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        n = 1
    memo[id(node)] = n = min(n, MAX_YAML_NODES + 1)
    return n


def load_yaml(path: Path | str, what: str = "a YAML file") -> Any:
    """Parse a YAML file with the safe loader, within the limits above; errors name the file."""
    p = Path(path)
    return parse_yaml(read_text(p, what), p, what)


def parse_yaml(text: str, p: Path, what: str = "a YAML file") -> Any:
    """load_yaml of a file's text already read."""
    check_yaml_text(text, str(p))
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise FileError(f"{p}: not valid YAML ({_yaml_msg(e)}); expected {what}") from None
    except ValueError as e:  # an integer past Python's int-digit limit (sys.get_int_max_str_digits)
        raise FileError(f"{p}: a value YAML cannot convert ({str(e)[:120]}); expected {what}") from None


def read_text(p: Path, what: str, limit: int = MAX_YAML_BYTES) -> str:
    """A file kselect reads, checked before it is opened (selector/base/reading.py); errors name the file."""
    return _read_checked(p, str(p), what, limit)


def _yaml_msg(e: yaml.YAMLError) -> str:
    return " ".join(str(e).split())[:300]


def check_out_path(path: Path | str, key: str) -> None:
    """An output file kselect will write: refuse, before any work, a path that is a directory, a special file
    (/proc, /dev, a FIFO), too long, or lies under a file (atomic_write would fail only after the work)."""
    check_lengths(path, f"{key} {short(str(path))}")
    p = Path(path)
    if p.is_dir():
        raise FileError(f"{key}: {short(str(path))} is a directory; allowed: a file path (its folder is created if missing)")
    if is_special(p) or (p.exists() and not p.is_file()):
        raise FileError(f"{key}: {short(str(path))} is a special file (under /proc, /sys, /dev, or a FIFO or device); allowed: "
                        "a regular file path")
    for parent in p.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise FileError(f"{key}: {short(str(path))} lies under {parent}, which is not a directory; allowed: a path "
                                "whose existing parents are directories")
            return


def _umask() -> int:
    mask = os.umask(0o022)  # reading it means setting it: put it straight back
    os.umask(mask)
    return mask


def atomic_write(path: Path | str, data: str | bytes) -> Path:
    """Write `data` to `path` via a temp file in the same directory and a rename."""
    with replaced(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def replaced(path: Path | str) -> Iterator[Path]:
    """A temp path beside `path` for a library that writes files itself (safetensors' save_file):
    fsynced and renamed onto `path` when the block ends, removed if it raises."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        os.close(fd)
    except OSError as e:
        raise FileError(f"{p}: cannot write ({e.__class__.__name__}: {e})") from None
    try:
        # mkstemp makes the file owner-only (0600); give it the mode a plain open() would (0666 & ~umask)
        os.chmod(tmp, 0o666 & ~_umask())
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise FileError(f"{p}: cannot write ({e.__class__.__name__}: {e})") from None
        raise
