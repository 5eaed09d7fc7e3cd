"""Both installs work from any directory: a wheel built from the checkout, installed into a fresh
venv, runs the README's selector and diff commands from an empty directory; the distribution
provides no top-level import name but `kselect`; a separate top-level package named `kernels`
(as Hugging Face's) imports and works beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "kselect", "selector", "backends", "kernels", "gemma4", "conf")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _setuptools_ok() -> bool:
    try:
        import setuptools  # noqa: PLC0415

        return int(setuptools.__version__.split(".")[0]) >= 68
    except ImportError:
        return False


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout's sources (the build leaves nothing in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    if _setuptools_ok():
        cmd.insert(5, "--no-build-isolation")  # no network needed
    subprocess.run(cmd, check=True, capture_output=True, env=_env(), timeout=600)
    [whl] = out.glob("kselect-*.whl")
    return whl


def _dependency_dirs() -> list[str]:
    """The site-packages folders this interpreter imports its dependencies from: inside a virtualenv its own
    (and any a .pth there adds), outside one the system's. A venv's `system_site_packages` would give the
    *base* interpreter's instead, which lacks what was installed into an active virtualenv (torch)."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; its dependencies come from this interpreter's site-packages (a .pth
    file adds those folders after the venv's own, so the wheel's kselect comes first)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, env=_env()).stdout.strip()
    Path(site, "zz_kselect_test_deps.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, env=_env(), timeout=600)  # fmt: skip
    return env_dir


def test_wheel_has_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        files = [line.split(",")[0] for line in z.read(record).decode().splitlines() if line]
    tops = {f.split("/")[0] for f in files}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"kselect"}
    for must in ("kselect/conf/config.yaml", "kselect/conf/model/gemma4_31b.yaml", "kselect/selector/api.py",
                 "kselect/kernels/reference.py", "kselect/run.py",
                 "kselect/oracle/worker.py", "kselect/oracle/stubs/flashinfer/__init__.py",  # run in vLLM's venv
                 "kselect/measurement/gemma4/fusion.py", "kselect/measurement/vllm/agree.py"):
        assert must in files
    # the measurement's shell scripts are package files: every one in the checkout is in the wheel
    scripts = {p.relative_to(ROOT).as_posix() for p in (ROOT / "kselect" / "measurement").rglob("*.sh")}
    assert scripts >= {"kselect/measurement/review/conf_diff.sh", "kselect/measurement/builds/install_vllm_fa.sh"}
    assert scripts <= set(files)


@pytest.mark.slow
def test_installed_wheel_runs_from_an_empty_directory(installed, tmp_path):
    kselect = installed / "bin" / "kselect"
    run = lambda *a: subprocess.run([str(kselect), *a], cwd=tmp_path, capture_output=True, text=True,  # noqa: E731
                                    timeout=300, env=_env())
    p = run("select", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8")
    assert p.returncode == 0, p.stderr
    assert "FLASHINFER" in p.stdout
    d = run("diff", "b.overlay=[pr48666]", "matrix=seed_smoke", "format=markdown")
    assert d.returncode == 0, d.stderr
    assert d.stdout.startswith("**kselect diff [] -> [pr48666] over matrix seed_smoke")
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import kselect.selector.api as a; print(a.CONF_DIR)"],
                           cwd=tmp_path, capture_output=True, text=True, env=_env())  # fmt: skip
    assert where.stdout.strip().startswith(str(installed)), where  # the wheel's copy, not the checkout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_installed_wheel_diffs_git_revisions_of_the_clone_it_runs_in(installed, tmp_path):
    """From a wheel, `a.conf=git:<rev>` reads conf/ from the git checkout holding the current
    directory (the user's clone); outside one it is exit 2 with one paragraph saying so."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "conf", clone / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    git = lambda *a: subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", *a],  # noqa: E731
                                    check=True, capture_output=True)
    git("init", "-q")
    git("add", "conf")
    git("commit", "-qm", "conf")
    kselect = str(installed / "bin" / "kselect")
    args = ["diff", "a.conf=git:HEAD", "check=true", "matrix=seed_smoke"]
    p = subprocess.run([kselect, *args], cwd=clone / "conf", capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 0 and "no cell changed" in p.stdout, p.stderr
    caps = clone / "conf" / "capabilities" / "default.yaml"
    text = caps.read_text()  # TRITON_ATTN's kernel blocks: the seed's multimodal FP8 cells on SM90 run it
    at = text.index("  kernel_block_sizes: [{multiple_of: 16}]", text.index("TRITON_ATTN:\n"))
    caps.write_text(text[:at] + text[at:].replace("{multiple_of: 16}", "{multiple_of: 32}", 1))
    p = subprocess.run([kselect, *args], cwd=clone, capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 1 and "kernel block 16 -> 32" in p.stdout, p.stderr  # the uncommitted change
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([kselect, *args], cwd=empty, capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "installed from a wheel" in p.stderr and "pass repo=<path of the clone>" in p.stderr


KERNELS_CHECK = (
    "import importlib.util, kernels, kselect.kernels.reference, kselect.selector.api\n"
    "from kernels import get_kernel\n"
    "print(get_kernel('x'), kernels.__file__, kselect.kernels.reference.__name__,\n"
    "      [n for n in ('selector', 'backends', 'gemma4', 'conf') if importlib.util.find_spec(n)])\n"
)


def _fake_hub_kernels(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("def get_kernel(name):\n    return f'hub:{name}'\n")
    return site


@pytest.mark.parametrize("where", ["elsewhere", "checkout"])
@pytest.mark.parametrize("install", ["editable", "wheel"])
def test_a_separate_kernels_package_works_beside_kselect(install, where, request, tmp_path):
    """Hugging Face's `kernels` is a top-level package; kselect's kernels are `kselect.kernels`.
    From any directory both import, the checkout's root too (its `kernels/` folder, imported by
    the bare name, hands the name to the installed package); kselect adds no other top-level
    name. `editable` is this interpreter's install of kselect (`pip install -e
    .`), `wheel` the wheel in a fresh venv."""
    site = _fake_hub_kernels(tmp_path)
    work = ROOT if where == "checkout" else tmp_path / "work"
    work.mkdir(exist_ok=True)
    py = sys.executable if install == "editable" else str(request.getfixturevalue("installed") / "bin" / "python")
    # the wheel in the checkout: -P keeps the current directory off sys.path, where the checkout's kselect/
    # folder (the package's top level only; its subpackages are the sibling folders) would shadow the
    # installed package, as in any project whose package folder sits at the repository root
    safe = ["-P"] if install == "wheel" and where == "checkout" else []
    p = subprocess.run([py, *safe, "-c", KERNELS_CHECK], cwd=work, capture_output=True, text=True, timeout=120,
                       env=_env(PYTHONPATH=str(site)))
    if install == "editable" and "No module named 'kselect'" in p.stderr:
        pytest.skip("kselect is not installed in this interpreter (pip install -e .)")
    assert p.returncode == 0, p.stderr
    hub, path, ours, others = p.stdout.split(maxsplit=3)
    assert hub == "hub:x" and path.startswith(str(site)) and ours == "kselect.kernels.reference"
    if where == "elsewhere":  # in the checkout its folders are found by their bare names (and refuse the import)
        assert others.strip() == "[]"
