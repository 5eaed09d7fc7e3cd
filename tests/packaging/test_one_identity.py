"""One name a module: the folders selector/, backends/, kernels/, gemma4/ are kselect.selector, ... through
pyproject.toml's package-dir, with no symbolic link in the repository. From the checkout's root a bare
`import selector` (backends, gemma4) fails with one line naming the `kselect.` spelling (`kernels`: below) (so no module is ever loaded twice, and
an exception class has one identity), and the editable install resolves `kselect.<folder>.*` to the folders
from the checkout's root and from any other directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("selector", "backends", "kernels", "gemma4")
PROBE = {"selector": "selector.api", "backends": "backends.base", "kernels": "kernels.reference",
         "gemma4": "gemma4.model"}  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=_env())  # fmt: skip


def test_no_symbolic_link_in_the_repository():
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s"], capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    links = [line.split("\t")[1] for line in files.stdout.splitlines() if line.startswith("120000 ")]
    assert links == []
    assert [p for p in ROOT.iterdir() if p.is_symlink()] == [] and [p for p in (ROOT / "kselect").iterdir()
                                                                    if p.is_symlink()] == []  # fmt: skip


@pytest.mark.parametrize("name", [n for n in (*FOLDERS, *PROBE.values()) if not n.startswith("kernels")])
def test_a_bare_import_from_the_checkout_fails_with_one_line_naming_kselect(name):
    top = name.split(".")[0]
    p = _python(f"import {name}", ROOT)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last == (f"ImportError: import kselect.{top}, not {top}: the folder is a subpackage of kselect "
                    "(pip install -e .)")  # fmt: skip


def test_a_bare_kernels_from_the_checkout_is_an_empty_stand_in_naming_kselect():
    """Where no other top-level `kernels` is installed, the bare name is an empty stand-in, as an absent package
    looks to a probe (transformers imports `kernels` to learn whether it is installed): no file, no submodule of
    the folder under the bare name, and its attributes name the kselect spelling in one line."""
    p = _python("import kernels\nprint(getattr(kernels, '__file__', None))\nkernels.reference", ROOT)
    assert p.returncode == 1 and p.stdout.split() == ["None"]
    assert p.stderr.strip().splitlines()[-1] == ("AttributeError: kernels.reference: import kselect.kernels, not kernels: "
                                                 "the folder is a subpackage of kselect (pip install -e .)")  # fmt: skip
    p = _python("import kernels.reference", ROOT)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'kernels.reference'"


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_the_editable_install_maps_the_folders_into_kselect(where, tmp_path):
    """Each module loads once, by its kselect name (no `selector.*` beside `kselect.selector.*`)."""
    code = ("import importlib, sys\n"
            f"for m in {sorted(PROBE.values())!r}:\n"
            "    print(importlib.import_module('kselect.' + m).__file__)\n"
            "print(importlib.import_module('kselect.selector.config.compose').CONF_DIR)\n"
            "print(sum(m.split('.')[0] in ('selector', 'backends', 'kernels', 'gemma4') for m in sys.modules))")  # fmt: skip
    p = _python(code, ROOT if where == "checkout" else tmp_path)
    if "No module named 'kselect'" in p.stderr:
        pytest.skip("kselect is not installed in this interpreter (pip install -e .)")
    assert p.returncode == 0, p.stderr
    *mods, conf, bare = p.stdout.split()
    if not conf.startswith(str(ROOT)):
        pytest.skip(f"kselect is installed from elsewhere ({conf}), not as this checkout's editable install")
    assert mods == [str(ROOT / f"{m.replace('.', '/')}.py") for m in sorted(PROBE.values())]
    assert conf == str(ROOT / "conf") and bare == "0"
