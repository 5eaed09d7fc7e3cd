"""kselect: declarative, config-driven attention-kernel selection.

The repository's folders are this package's subpackages (pyproject.toml's package-dir):
`kselect.selector` (configs -> rules -> a Selection; no torch), `kselect.backends` (a
selection -> kernel calls), `kselect.kernels` (the kernels; imports nothing else of kselect),
`kselect.gemma4` (the bundled model) and `kselect.conf` (the Hydra configs, package data).
In a checkout, kselect/selector, kselect/backends, kselect/kernels, kselect/gemma4 and kselect/conf are
symbolic links to those folders, so the names resolve the same from a checkout (static tools, PYTHONPATH),
an editable install and the wheel, and nothing else of the checkout is importable under `kselect`.
"""

__version__ = "0.1.0"
