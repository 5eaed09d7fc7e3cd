"""Repo-wide pytest setup: kselect's plugin (the `kselect_matrix` marker, the `kselect_cell`
fixture, `--kselect-matrix`; see selector/pytest_plugin.py) and pytester for its own tests."""

pytest_plugins = ["selector.pytest_plugin", "pytester"]
