"""kselect: declarative, config-driven attention-kernel selection.

The repository's folders are this package's subpackages (pyproject.toml's package-dir):
`kselect.selector` (configs -> rules -> a Selection; no torch), `kselect.backends` (a
selection -> kernel calls), `kselect.kernels` (the kernels; imports nothing else of kselect),
`kselect.gemma4` (the bundled model) and `kselect.conf` (the Hydra configs, package data).
"""

__version__ = "0.1.0"

from pathlib import Path as _Path

# Run from a source checkout without installing (the GPU machine, `python bench/...`): the
# subpackages are the checkout's sibling folders, so add the checkout to this package's path.
# An installed wheel has them inside this folder and never takes this branch.
_root = _Path(__file__).resolve().parent.parent
if (_root / "pyproject.toml").is_file() and (_root / "selector" / "api.py").is_file():
    __path__.append(str(_root))  # type: ignore[name-defined]
del _Path, _root
