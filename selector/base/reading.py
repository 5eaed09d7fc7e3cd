"""Reading a file the user names: checked before it is opened, parsed within bounds.

`check_path` refuses, before any open(), what would hang, fail with an OSError or read something that is no
file: a path or a component too long for the file system, a NUL byte, a symlink loop, a dangling link, a
FIFO, socket or device, anything under /proc, /sys or /dev (their "files" block, fail on read or never end),
and a folder where a file is meant (or the reverse). `load_json` then reads at most `limit` bytes and parses
JSON no deeper than MAX_JSON_DEPTH and with no integer longer than MAX_INT_DIGITS digits (Python's own
int-digit limit raises a ValueError naming nothing): the error names the file and the key.
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any

from .errors import KSelectError

MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255  # Linux's PATH_MAX and NAME_MAX
MAX_JSON_BYTES = 16 << 20
MAX_JSON_DEPTH = 64  # published config.json files nest 3 levels
MAX_INT_DIGITS = 100  # a config's largest integers have 20 digits
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory", stat.S_IFREG: "a regular file"}


class FileError(KSelectError):
    """A file that cannot be read or written as asked; the message names the file."""


def short(value: object, n: int = 80) -> str:
    """repr(value), cut to about n characters for a message (a 5000-character argument stays readable)."""
    r = repr(value)
    return r if len(r) <= n else f"{r[:n]}...({len(r)} characters)"


def check_lengths(path: str | Path, label: str) -> None:
    """Refuse a path the file system cannot name (too long, a NUL byte), before any system call."""
    s = os.fspath(path)
    if "\x00" in s:
        raise FileError(f"{label}: the path holds a NUL byte; allowed: a path without control characters")
    b = s.encode("utf-8", "surrogateescape")
    if len(b) > MAX_PATH_BYTES:
        raise FileError(f"{label}: a path of {len(b)} bytes; allowed: at most {MAX_PATH_BYTES} bytes")
    longest = max((len(c) for c in b.split(b"/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise FileError(f"{label}: a path component of {longest} bytes; allowed: at most {MAX_NAME_BYTES} bytes each")


def is_special(path: str | Path) -> bool:
    """Under /proc, /sys or /dev (after links): no plain file there."""
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r + "/") for r in SPECIAL_ROOTS)


def check_path(path: str | Path, label: str, expected: str, kind: str = "file") -> Path:
    """`path` as a Path if it is a regular file (`kind="file"`) or a folder (`kind="dir"`) that may be read;
    FileError starting with `label` (the key or flag) and saying what was `expected` otherwise."""
    check_lengths(path, label)
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        gone = os.path.islink(p)
        raise FileError(f"{label}: {'a dangling symlink' if gone else 'does not exist (no such file or folder)'}; expected {expected}") from None
    except OSError as e:
        what = "a symlink loop" if e.errno == 40 else f"not readable ({e.strerror})"  # 40: ELOOP
        raise FileError(f"{label}: {what}; expected {expected}") from None
    if is_special(p):
        raise FileError(f"{label}: under {'/'.join(os.path.realpath(p).split('/')[:2])}, a special file; "
                        f"expected {expected}")
    want = stat.S_IFDIR if kind == "dir" else stat.S_IFREG
    got = stat.S_IFMT(st.st_mode)
    if got != want:
        raise FileError(f"{label}: {_KINDS.get(got, 'not a regular file')}; expected {expected}")
    return p


def read_bytes(path: str | Path, label: str, expected: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """A checked file's bytes, at most `limit` of them."""
    p = check_path(path, label, expected)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise FileError(f"{label}: not readable ({e.strerror}); expected {expected}") from None
    if len(data) > limit:
        raise FileError(f"{label}: more than {limit} bytes; allowed: at most {limit} bytes for {expected}")
    return data


def read_text(path: str | Path, label: str, expected: str, limit: int = MAX_JSON_BYTES) -> str:
    try:
        return read_bytes(path, label, expected, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"{label}: not UTF-8 text (byte {e.start}); expected {expected}") from None


class _LongInt(str):
    """An integer literal past MAX_INT_DIGITS, kept as text until its key is known."""


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(text: str) -> int:
    """How deep arrays and objects nest (strings skipped), without recursion."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    brackets = re.sub(r"[^\[\]{}]", "", _STRINGS.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def _long_int_key(obj: Any) -> str | None:
    """The key path of the first over-long integer in a parsed document (iterative: no depth to fear)."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, _LongInt):
            return where or "(the document)"
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        stack += [(f"{where}.{k}" if where else str(k), x) for k, x in items]
    return None


def parse_json(text: str, label: str, expected: str) -> Any:
    """JSON text within the depth and integer bounds; FileError naming `label` (and the key) otherwise."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise FileError(f"{label}: nested deeper than {MAX_JSON_DEPTH} levels; allowed: at most {MAX_JSON_DEPTH} "
                        f"(expected {expected})")
    long: list[str] = []

    def parse_int(digits: str) -> int | _LongInt:
        if len(digits.lstrip("-")) <= MAX_INT_DIGITS:
            return int(digits)
        long.append(digits)
        return _LongInt(digits)

    try:
        obj = json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as e:
        raise FileError(f"{label}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); expected {expected}") from None
    except RecursionError:
        raise FileError(f"{label}: nested too deep; expected {expected}") from None
    if long:
        raise FileError(f"{label}: {_long_int_key(obj)}: an integer of more than {MAX_INT_DIGITS} digits; allowed: at most "
                        f"{MAX_INT_DIGITS} digits (expected {expected})")
    return obj


def load_json(path: str | Path, label: str, expected: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file the user names, checked, bounded and parsed (see the module docstring)."""
    return parse_json(read_text(path, label, expected, limit), label, expected)
