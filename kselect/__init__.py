"""kselect: declarative, config-driven attention-kernel selection.

The repository's folders are this package's subpackages (pyproject.toml's package-dir):
`kselect.selector` (configs -> rules -> a Selection; no torch), `kselect.backends` (a
selection -> kernel calls), `kselect.kernels` (the kernels; imports nothing else of kselect),
`kselect.gemma4` (the bundled model) and `kselect.conf` (the Hydra configs, package data).
Each module has one name: a bare `import selector` (or backends, kernels, gemma4) from the checkout's root fails
with a one-line hint, and inside the folders imports between them are relative (`from ..kernels import x`).
"""

__version__ = "0.1.0"
