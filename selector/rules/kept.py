"""What the resolutions of one prelude share (resolve.py's `Prelude`).

An objective's search resolves every combination of per-group pins from one prelude (selector/measure/pins.py):
configs that differ only in `attention.backend_per_kind`. A group's backend choice and layer-init check read only
its own kind's pin, and its finished selection only that choice (with what later steps added to it) and its KV
block, so each is made once per prelude and pin and handed to every combination that asks again. A choice is
handed out as a fresh copy (later steps add to its lists); a refusal is raised again as it was first raised.
"""

from __future__ import annotations

from collections.abc import Callable

from ..base.errors import SelectionError
from .candidates import Choice


class Kept:
    """One prelude's memo: key -> value, or the SelectionError that computing it raised."""

    def __init__(self) -> None:
        self._memo: dict[tuple, object] = {}

    def value(self, key: tuple, compute: Callable[[], object]):
        """compute(), once per key; a SelectionError it raises is raised again on every ask."""
        hit = self._memo.get(key, _MISS)
        if hit is _MISS:
            try:
                hit = compute()
            except SelectionError as e:
                hit = e
            self._memo[key] = hit
        if isinstance(hit, SelectionError):
            raise hit.with_traceback(None)
        return hit

    def choice(self, key: tuple, choose: Callable[[], Choice]) -> Choice:
        """choose(), once per key, as a fresh copy each time."""
        return self.value(key, choose).copy()


_MISS = object()
