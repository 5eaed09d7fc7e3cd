"""Every package folder ships: pyproject.toml lists each folder under the folders its package-dir maps (a new
selector sub-package left out would import from a checkout and be missing from the wheel). That includes folders of
data only (conf/model/, kselect/oracle/stubs/): setuptools treats every folder with an importable name as a package
and warns, for each one not listed, that a later version will not ship it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_lists_every_package_folder():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, dirs = set(tool["packages"]), tool["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for d in [ROOT / folder, *(p for p in (ROOT / folder).rglob("*") if p.is_dir())]:
            rel = d.relative_to(ROOT / folder)
            if all(part.isidentifier() and part != "__pycache__" for part in rel.parts):  # what Python could import
                found.add(".".join([name, *rel.parts]))
    assert found == listed
