"""Functions a higher layer of the selector lends to selector/base, which may not import it: set once when that
layer's module is imported, read at call time (None until then)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# selector/config/releases.py: a release's overrides with its chain of overlays spelled out (releases.expand)
release_expander: Callable[[list[str], Path], tuple[list[str], list]] | None = None
