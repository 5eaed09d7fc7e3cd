"""Optional dependencies (pyproject.toml's extras): a missing one is one line naming the extra to install.

    require("matplotlib", "matplotlib", "kselect plot")   # KSelectError: ... pip install 'kselect[sweep]'
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata

from .errors import KSelectError

# Hydra plugins a command-line choice loads: override -> (module, distribution).
PLUGINS = {"hydra/launcher=joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher")}


def extra_of(dist: str) -> str | None:
    """The extra of the installed kselect's metadata that lists `dist` (None: not an extra, or no metadata)."""
    try:
        reqs = metadata.requires("kselect") or []
    except metadata.PackageNotFoundError:
        return None
    norm = re.sub(r"[-_.]+", "-", dist).lower()
    for r in reqs:
        name = re.sub(r"[-_.]+", "-", re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]).lower()
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", r)
        if name == norm and extra:
            return extra[1]
    return None


def require(module: str, dist: str, needed_by: str) -> None:
    """Import `module` or raise KSelectError naming the package and the extra that installs it."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        extra = extra_of(dist)
        how = f"pip install 'kselect[{extra}]'" if extra else f"pip install {dist}"
        raise KSelectError(f"{needed_by} needs {dist}, which is not installed ({e.__class__.__name__}: {e}); "
                           f"allowed: install it with {how}") from None


def check_plugins(overrides: list[str]) -> None:
    """Each Hydra plugin a command line chooses (`hydra/launcher=joblib`) is installed."""
    for o in overrides:
        if o in PLUGINS:
            require(*PLUGINS[o], o)
