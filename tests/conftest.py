"""Repo-wide test setup: the repo root on sys.path, and kselect's pytest plugin (the
`kselect_matrix` marker, the `kselect_cell` fixture, `--kselect-matrix`), see
selector/pytest_plugin.py. pytester runs the plugin's own tests."""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

pytest_plugins = ["selector.pytest_plugin", "pytester"]
