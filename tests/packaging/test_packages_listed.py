"""Every package folder ships: pyproject.toml lists each folder with an __init__.py under the folders its
package-dir maps (a new selector sub-package left out would import from a checkout and be missing from
the wheel)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_data(package: str, rel: Path) -> bool:
    """Folders shipped as package data, never imported here (kselect/oracle/stubs: run in vLLM's own venv)."""
    return package == "kselect" and rel.parts[:2] == ("oracle", "stubs")


def test_pyproject_lists_every_package_folder():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, dirs = set(tool["packages"]), tool["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts or _is_data(name, rel):
                continue
            found.add(".".join([name, *rel.parts]))
        found.add(name)  # namespace folders (kernels/, conf/) are listed by name too
    assert found == listed
