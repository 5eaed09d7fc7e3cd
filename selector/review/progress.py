"""Progress for long commands (matrix, diff, plot, conformance, benchmarks): one line on stderr,
rewritten in place, only on a terminal. Quiet when stderr is piped or redirected, under CI
(`CI` set, as GitHub Actions and most CI systems do) and with `KSELECT_PROGRESS=0`.

    for cell in progress(cells, "matrix default"):
        ...

A few lines of our own instead of tqdm: tqdm is not a dependency of kselect.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def enabled(stream=None) -> bool:
    stream = stream or sys.stderr
    if os.environ.get("KSELECT_PROGRESS", "").lower() in ("0", "false", "no"):
        return False
    if os.environ.get("KSELECT_PROGRESS", "").lower() in ("1", "true", "yes"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("CI")


def progress(items: Iterable[T], desc: str, total: int | None = None, stream=None, every_s: float = 0.1) -> Iterator[T]:
    """Yield items unchanged; on a terminal draw `desc  [####....]  i/total  elapsed`."""
    stream = stream or sys.stderr
    if not enabled(stream):
        yield from items
        return
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    t0 = last = time.perf_counter()
    n = 0

    def draw(final: bool = False) -> None:
        el = time.perf_counter() - t0
        if total:
            filled = int(24 * n / total)
            bar = f"[{'#' * filled}{'.' * (24 - filled)}] {n}/{total}"
        else:
            bar = f"{n}"
        stream.write(f"\r{desc}  {bar}  {el:.1f}s" + ("\n" if final else ""))
        stream.flush()

    try:
        for item in items:
            yield item
            n += 1
            now = time.perf_counter()
            if now - last >= every_s:
                last = now
                draw()
    finally:
        draw(final=True)
