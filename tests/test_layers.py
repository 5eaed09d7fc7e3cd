"""The layers import one way (README, layout), checked on the source with ast, lazy (function-level)
imports included:

- `kernels/` imports nothing else of kselect;
- the selector never imports torch, triton, the backends or the kernels (its one exception: platform
  detection, selector/config/detect.py, for `platform=auto`);
- the selector's sub-packages import only their own layer and the layers below it (LAYERS);
- inside the four folders, imports of kselect's folders are relative (`from ..kernels import x`): the one spelling
  that names the same module on disk and installed, so tools that read imports by path see the real edges;
- the measurement (kselect/measurement/) is a tool layer above: nothing in the four folders imports it, and
  bench/ holds no code, only experiment configs and records;
- no import cycle anywhere in the project: the strongly connected components of the module import graph
  over kselect/, selector/, backends/, kernels/ and gemma4/ are single modules.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"kselect": "kselect", "selector": "kselect.selector", "backends": "kselect.backends",
            "kernels": "kselect.kernels", "gemma4": "kselect.gemma4"}
# the selector's sub-packages, lowest first; a module may import its own layer and those below it.
# The selector's top-level module api.py (the facade) sits above them all; the commands are kselect/commands/.
LAYERS = ("base", "config", "outputs", "evidence", "rules", "measure", "export", "review")
FOLDERS = ("selector", "backends", "kernels", "gemma4")  # kselect's subpackages by package-dir
PLATFORM_DETECT = ROOT / "selector" / "config" / "detect.py"  # platform=auto: the one module that may import torch


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1], path.stem]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    out = {}
    for folder in PACKAGES:
        for path in (ROOT / folder).rglob("*.py"):
            if "stubs" not in path.relative_to(ROOT).parts:  # vLLM's import stubs, run in its own venv
                out[_module_name(path)] = path
    return out


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports, at any depth (relative imports resolved inside its package)."""
    name = _module_name(path)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
            out |= subs if subs <= set(_modules()) else {base, *subs}
    return out


def _edges(path: Path) -> set[str]:
    """The project modules a file imports. `from pkg import module` is an edge to the module (not to pkg's
    __init__)."""
    mods, me = _modules(), _module_name(path)
    out = set()
    for n in _imports(path):
        if n in mods:  # `from module import name` adds the module itself, and no module named module.name
            out.add(n)
    return out - {me}


def _graph() -> dict[str, set[str]]:
    return {m: _edges(p) for m, p in _modules().items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _kselect_packages(names: set[str]) -> set[str]:
    return {".".join(n.split(".")[:2]) for n in names if n == "kselect" or n.startswith("kselect.")}


def _selector_files() -> list[Path]:
    return sorted((ROOT / "selector").rglob("*.py"))


def _layer(module: str) -> int:
    """The layer of a kselect.selector module: its sub-package's index; top-level modules sit above all."""
    parts = module.split(".")
    return LAYERS.index(parts[2]) if len(parts) > 3 or (len(parts) == 3 and parts[2] in LAYERS) else len(LAYERS)


@pytest.mark.parametrize("path", sorted((ROOT / "kernels").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_kernels_import_nothing_else_of_kselect(path):
    assert _kselect_packages(_imports(path)) <= {"kselect.kernels"}


@pytest.mark.parametrize("path", _selector_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_selector_imports_no_lower_layer(path):
    names = _imports(path)
    assert _kselect_packages(names) <= {"kselect.selector", "kselect.conf"}
    if path != PLATFORM_DETECT:
        assert not {n for n in names if n.split(".")[0] in ("torch", "triton")}


def test_every_selector_folder_is_a_declared_layer():
    folders = {p.parent.name for p in (ROOT / "selector").glob("*/__init__.py")}
    assert folders == set(LAYERS)
    assert not list((ROOT / "selector").glob("*/*/*.py")), "one level of sub-packages"


@pytest.mark.parametrize("path", _selector_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_selector_layers_import_downwards(path):
    me = _module_name(path)
    up = sorted(n for n in _edges(path) if n.startswith("kselect.selector.") and _layer(n) > _layer(me))
    assert not up, f"{me} (layer {_layer(me)}) imports a layer above it: {up}"


@pytest.mark.parametrize("path", [p for f in FOLDERS for p in sorted((ROOT / f).rglob("*.py"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_folders_import_each_other_relatively(path):
    absolute = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            absolute |= {a.name for a in node.names if a.name.startswith("kselect")}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("kselect"):
            absolute.add(node.module)
    assert not absolute, f"absolute imports {sorted(absolute)}: write them relative (`from ..kernels import x`)"


@pytest.mark.parametrize("path", [p for f in FOLDERS for p in sorted((ROOT / f).rglob("*.py"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_folders_never_import_the_measurement(path):
    assert not {n for n in _imports(path) if n.startswith("kselect.measurement")}


def test_bench_holds_only_experiment_configs_and_records():
    """Measurement code is the package's (kselect/measurement/); bench/ keeps what it runs and what it recorded."""
    assert {p.name for p in (ROOT / "bench").iterdir() if p.name != "__pycache__"} == {"conf", "results", "README.md"}
    code = [p for p in (ROOT / "bench" / "conf").rglob("*") if p.is_file() and p.suffix != ".yaml"]
    assert code == [], f"not configs: {code}; measurement programs go in kselect/measurement/"


def test_no_import_cycle_in_the_project():
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_imports_and_cycles():
    assert _imports(ROOT / "kselect" / "measurement" / "conformance.py") >= {"kselect.selector.measure.claims", "torch"}
    assert "kselect.selector.rules.resolve" in _edges(ROOT / "selector" / "measure" / "objective.py")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _layer("kselect.selector.base.errors") == 0 and _layer("kselect.selector.api") == len(LAYERS)
