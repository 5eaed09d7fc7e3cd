"""Repo-wide pytest setup: kselect's plugin (the `kselect_matrix` marker, the `kselect_cell`
fixture, `--kselect-matrix`; see selector/pytest_plugin.py) and pytester for its own tests."""

import os

import torch

# Without a GPU our Triton kernels run in Triton's CPU interpreter. Triton reads TRITON_INTERPRET
# when a @triton.jit function is defined, so set it here, before any test module imports kernels/.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["selector.pytest_plugin", "pytester"]
