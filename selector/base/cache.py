"""The user cache (`$XDG_CACHE_HOME/kselect`, default `~/.cache/kselect`): results that are pure functions of
file contents, kept as JSON keyed by those contents, so a command does not re-parse or re-compose what it saw.

Every key holds the content hashes of the files a result came from and `code_key()` (kselect's version, the
selector's own source and the libraries that parse and compose): a changed file, release or library misses.
An entry is a header naming its key and the SHA-256 of its JSON body, then the body; one that does not
parse, names another key or whose body does not hash to its header is a miss and is rewritten, never trusted. Writes are atomic (files.atomic_write), so a killed process leaves no torn entry.
`KSELECT_CACHE=0` turns the cache off (every call computes).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from .files import FileError, atomic_write

SELECTOR_DIR = Path(__file__).resolve().parents[1]
LIBRARIES = ("kselect", "hydra-core", "omegaconf", "pydantic", "pydantic-core", "PyYAML")


def cache_dir() -> Path:
    """Where kselect keeps its cache (the oracle's wheels and venvs live here too)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kselect"


def enabled() -> bool:
    return os.environ.get("KSELECT_CACHE", "1") not in ("0", "false", "no")


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def library_versions() -> str:
    """The installed versions of kselect and of the libraries whose behaviour a cached result holds."""
    from importlib import metadata  # noqa: PLC0415

    out = []
    for name in LIBRARIES:
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=none")
    return ";".join(out)


@functools.lru_cache(maxsize=1)
def _source_key() -> str:
    files = sorted(SELECTOR_DIR.rglob("*.py"))
    return digest(*(f"{p.relative_to(SELECTOR_DIR)}\0".encode() + p.read_bytes() for p in files))


@functools.lru_cache(maxsize=1)
def _versions_key() -> str:
    return library_versions()


def code_key() -> str:
    """What every cached result also depends on: the library versions (a new kselect release misses) and the
    selector's source (an edited checkout misses too)."""
    return digest(_versions_key(), _source_key())


def read_entry(kind: str, key: str) -> Any | None:
    """The value stored under key, or None: a missing, unreadable, torn or altered entry is a miss."""
    if not enabled():
        return None
    try:
        head, _, body = (cache_dir() / kind / f"{key}.json").read_bytes().partition(b"\n")
        meta = json.loads(head)
        if not isinstance(meta, dict) or meta.get("key") != key or meta.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        return json.loads(body)
    except (OSError, ValueError):
        return None


def write_entry(kind: str, key: str, value: Any) -> None:
    """Store value (JSON-exact: json_exact) under key: a header line naming the key and the body's hash, then
    the body. A cache that cannot be written is left as it is."""
    if not enabled() or not json_exact(value):
        return
    body = json.dumps(value, separators=(",", ":")).encode()
    head = json.dumps({"key": key, "sha256": hashlib.sha256(body).hexdigest()}).encode()
    try:
        atomic_write(cache_dir() / kind / f"{key}.json", head + b"\n" + body)
    except FileError:
        pass  # a read-only or full cache folder costs time, never an answer


def json_exact(value: Any) -> bool:
    """True when JSON gives value back exactly: str-keyed dicts, lists, str, int, finite float, bool, None."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_exact(v) for k, v in value.items())
    return False


def file_key(path: Path) -> str:
    """The content hash of one file (with its name, which a check may read)."""
    return digest(path.name, path.read_bytes())


def load_yaml_cached(path: Path | str, what: str = "a YAML file") -> Any:
    """files.load_yaml, kept parsed under the file's content hash: a large data file (conf/perf/*.yaml, 850 KB)
    parses once, then loads as JSON in milliseconds. The checks load_yaml makes ran on that same content."""
    from .files import load_yaml  # noqa: PLC0415

    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError:
        return load_yaml(p, what)  # its error names the file
    key = digest("yaml", code_key(), text)
    hit = read_entry("yaml", key)
    if hit is not None:
        return hit
    value = load_yaml(p, what)
    write_entry("yaml", key, value)
    return value
