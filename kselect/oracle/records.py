"""Reading an oracle record (JSONL, optionally gzip): every line an object with a string `key`, read through the
checked reader (kselect/selector/base/reading.py), or one RecordError naming the file and the line."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from kselect.selector.base.errors import KSelectError
from kselect.selector.base.reading import FileError, check_path, parse_json

EXPECTED = "an oracle record (JSON lines, gzip when named .gz) that `kselect oracle` wrote"
MAX_LINE = 1 << 20  # a record line is a few hundred bytes


class RecordError(KSelectError):
    """A file that is no oracle record; the message names it (exit 2)."""


def records(path: str | Path, complete_only: bool = False) -> Iterator[dict]:
    """Each record of `path`; `complete_only` skips an unterminated last line (a torn append)."""
    p = Path(path)
    try:
        check_path(p, str(p), EXPECTED)
    except FileError as e:
        raise RecordError(str(e)) from None
    opener = gzip.open if p.suffix == ".gz" else open
    n = 0
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            for n, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    raise RecordError(f"{p}: line {n} is longer than {MAX_LINE} characters; expected {EXPECTED}")
                if not line.strip() or (complete_only and not line.endswith("\n")):
                    continue
                r = parse_json(line, f"{p}: line {n}", EXPECTED)
                if not isinstance(r, dict) or not isinstance(r.get("key"), str):
                    raise RecordError(f"{p}: line {n} is {'an object without a string key' if isinstance(r, dict) else 'a JSON ' + type(r).__name__}; "
                                      f"expected {EXPECTED}")
                yield r
    except FileError as e:
        raise RecordError(str(e)) from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
        what = "not gzip" if isinstance(e, gzip.BadGzipFile) else f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
        raise RecordError(f"{p}: unreadable at line {n + 1} ({what}); expected {EXPECTED}") from None


def exists(path: Path) -> bool:
    """A record path that names something (a dangling link included: reading it then says so)."""
    return os.path.lexists(path)
