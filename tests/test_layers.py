"""The layers import one way (README, layout): `kernels/` imports nothing else of kselect, the
selector never imports torch, the backends or the kernels. Checked on the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved inside its package)."""
    out = set()
    pkg = "kselect." + path.parent.name
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                out.add(f"{base}.{node.module}" if node.module else base)
            else:
                out.add(node.module or "")
    return out


def _kselect_packages(names: set[str]) -> set[str]:
    return {".".join(n.split(".")[:2]) for n in names if n == "kselect" or n.startswith("kselect.")}


@pytest.mark.parametrize("path", sorted((ROOT / "kernels").rglob("*.py")), ids=lambda p: p.name)
def test_kernels_import_nothing_else_of_kselect(path):
    assert _kselect_packages(_imports(path)) <= {"kselect.kernels"}


@pytest.mark.parametrize("path", sorted((ROOT / "selector").glob("*.py")), ids=lambda p: p.name)
def test_the_selector_imports_no_lower_layer(path):
    names = _imports(path)
    assert _kselect_packages(names) <= {"kselect.selector", "kselect.conf"}
    if path.name != "detect.py":  # platform=auto: the one module that may import torch
        assert not {n for n in names if n.split(".")[0] in ("torch", "triton")}


def test_the_checker_sees_imports():
    assert _imports(ROOT / "kselect" / "conformance.py") >= {"kselect.selector.claims", "torch"}
