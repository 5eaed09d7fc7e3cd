"""A vLLM release's own CPU environment for the oracle, built once and reused.

The release comes as a version on the package registry, a local wheel, or an unpacked source
tree (a folder holding vllm/). Under $KSELECT_VLLM_HOME (default ~/.cache/kselect/vllm):
  wheels/vllm-VERSION-*.whl   the wheel (`pip download --no-deps`, once)
  src-VERSION/                its Python sources only (no compiled extensions, no CUDA sources)
  venv-VERSION/               torch CPU, the release's transformers pin and the modules vLLM
                              imports to build its configs and layers; no kselect inside
Each step builds into a temporary name and renames it when complete (a `.done` marker inside),
under a lock per release: a second run, or a run beside it, reuses what is there.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kselect.selector.base.errors import KSelectError

# torch: the CPU build the chain is known to run with (the releases pin a CUDA torch 2.14.0; the
# selection code runs the same on 2.13.0+cpu, bench/results/vllm/README.md)
TORCH = "torch==2.13.0"
TRITON = "triton~=3.8.0"
# imported by vLLM's config and layer modules (never run); kept from kselect/measurement/vllm/setup.sh
IMPORT_DEPS = ("regex", "cachetools", "psutil", "numpy", "requests", "tqdm", "py-cpuinfo", "msgspec", "cloudpickle",
               "einops", "pyzmq", "blake3", "sentencepiece", "protobuf", "cbor2", "aiohttp", "openai",
               "openai-harmony", "pillow", "pybase64", "uvloop", "prometheus_client", "xgrammar", "fastapi",
               "partial-json-parser", "llguidance", "uvicorn", "prometheus-fastapi-instrumentator", "pydantic>=2", "pyyaml")
# imported by vLLM's quantization configs (a checkpoint's quantization_config: gpt-oss's mxfp4, DeepSeek's fp8
# blocks): compressed-tensors at the release's pin (its METADATA), and the one dependency of it a venv above lacks.
# A venv built before these were listed gets them once, without dependencies (`.extras` inside names them).
# mistral_common: imported by pixtral.py, which llava.py and mistral3.py import (the wrappers grid), with the
# dependencies of it the venv above lacks (its numpy pin is not taken: the venv's numpy stays)
MODEL_DEPS = ("compressed-tensors", "loguru", "mistral_common", "jsonschema", "jsonschema-specifications", "referencing",
              "rpds-py", "tiktoken", "pydantic-extra-types", "pycountry")
# releases whose transformers requirement has no upper bound: the transformers of the release's own weeks
# (0.28.0, 2026-08-26, asks only >=5.5.3; the newest transformers postdate it by months). The release pins the rest.
ERA_TRANSFORMERS = {"0.28.0": "==5.15.1"}
SKIP_SUFFIXES = (".so", ".h", ".hpp", ".cuh", ".inl", ".cu", ".cpp")
VERSION_RE = re.compile(r"\d+\.\d+\.\d+[a-z0-9.+-]*")  # whole strings only (fullmatch): a version
# names cache folders, venvs and lock files


class SourceError(KSelectError):
    """The release named cannot be found or is not a vLLM release (bad input, exit 2)."""


def home() -> Path:
    return Path(os.environ.get("KSELECT_VLLM_HOME", Path.home() / ".cache" / "kselect" / "vllm"))


@dataclass(frozen=True)
class Release:
    version: str
    wheel: Path | None  # None for a source tree
    src: Path | None  # a source tree given as such (used in place)


@dataclass(frozen=True)
class Env:
    version: str
    src: Path
    python: Path
    flashinfer: str  # the flashinfer-python version the release pins


def resolve(source: str, root: Path | None = None, download=None) -> Release:
    """A version (or `latest`), a wheel path or a source folder -> the release; SourceError if none."""
    root = root or home()
    p = Path(source).expanduser()
    if source.endswith(".whl") or p.is_file():
        if not p.is_file():
            raise SourceError(f"wheel {source}: no such file; give a vLLM wheel (vllm-VERSION-*.whl), a vLLM "
                              "version on the package registry (e.g. 0.34.0) or an unpacked source folder.")
        m = re.match(r"vllm-([^-]+)-", p.name)
        if not m or not VERSION_RE.fullmatch(m.group(1)) or not zipfile.is_zipfile(p):
            raise SourceError(f"wheel {source}: not a vLLM wheel (expected a zip named vllm-VERSION-*.whl).")
        return Release(m.group(1), p.resolve(), None)
    if p.is_dir() or "/" in source or source.startswith("."):
        if not (p / "vllm" / "__init__.py").is_file():
            raise SourceError(f"source folder {source}: {'no vllm/__init__.py in it' if p.is_dir() else 'no such folder'}"
                              "; give an unpacked vLLM source tree (the folder holding vllm/), a wheel or a version.")
        version = source_version(p)
        if not VERSION_RE.fullmatch(version):
            raise SourceError(f"source folder {source}: its version {version[:80]!r} is not a release version (e.g. "
                              "0.34.0; it names cache folders and lock files); give a source tree of a vLLM release.")
        return Release(version, None, p.resolve())
    if source == "latest":
        source = latest_version()
    if not VERSION_RE.fullmatch(source):
        raise SourceError(f"vLLM release {source!r}: not a version (e.g. 0.34.0), `latest`, a wheel path or a "
                          "source folder.")
    wheel = _cached_wheel(root, source) or (download or _download)(source, root)
    return Release(source, wheel, None)


def source_version(tree: Path) -> str:
    """A source tree's version: its dist-info beside vllm/, else vllm/_version.py."""
    for meta in sorted(tree.glob("vllm-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    v = tree / "vllm" / "_version.py"
    if v.is_file():
        m = re.search(r"""(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", v.read_text())
        if m:
            return m.group(1)
    raise SourceError(f"source folder {tree}: no version found (a vllm-*.dist-info/METADATA or vllm/_version.py).")


def latest_version() -> str:
    """The newest vLLM release on the package registry (pip's own index query)."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True)
    m = re.search(r"vllm \(([^)]+)\)", r.stdout)
    if r.returncode or not m:
        raise SourceError("vLLM release `latest`: the package registry did not answer `pip index versions vllm` "
                          f"({(r.stderr or r.stdout).strip()[:200]}); give a version, a wheel or a source folder.")
    return m.group(1)


def _cached_wheel(root: Path, version: str) -> Path | None:
    found = sorted((root / "wheels").glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


def _download(version: str, root: Path) -> Path:
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    tmp = wheels / f".download-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        f"vllm=={version}", "-d", str(tmp)], capture_output=True, text=True)
    got = sorted(tmp.glob("vllm-*.whl"))
    if r.returncode or not got:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SourceError(f"vLLM release {version}: no wheel on the package registry (`pip download vllm=={version}` "
                          f"failed: {(r.stderr or '').strip().splitlines()[-1:] or ['no output']}[0]); give a released "
                          "version, a wheel or a source folder.")
    dest = wheels / got[0].name
    os.replace(got[0], dest)
    shutil.rmtree(tmp, ignore_errors=True)
    return dest


def requirement(metadata: str, name: str) -> str | None:
    """`name`'s specifier in a wheel's METADATA (`Requires-Dist: name<5.23.0,>=5.16.1`)."""
    for line in metadata.splitlines():
        m = re.match(rf"Requires-Dist:\s*{re.escape(name)}\s*([^;]*)", line, re.I)
        if m:
            return m.group(1).strip().strip("()")
    return None


@contextmanager
def _locked(root: Path, version: str):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".lock-{version}", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _metadata(src: Path) -> str:
    metas = sorted(src.glob("vllm-*.dist-info/METADATA"))
    return metas[0].read_text(errors="replace") if metas else ""


def plan(release: Release, root: Path | None = None) -> dict:
    """What ensure() would do, without doing it (for --dry-run)."""
    root = root or home()
    src = release.src or root / f"src-{release.version}"
    venv = root / f"venv-{release.version}"
    return {"version": release.version, "wheel": str(release.wheel) if release.wheel else None, "src": str(src),
            "src_ready": release.src is not None or (src / ".done").is_file(), "venv": str(venv),
            "venv_ready": (venv / ".done").is_file()}


def ensure(release: Release, root: Path | None = None, pip=None, quiet: bool = False) -> Env:
    """The release's sources and venv, built where missing (atomically, under a lock)."""
    root = root or home()
    with _locked(root, release.version):
        src = release.src or _ensure_src(release, root)
        meta = _metadata(src)
        venv = _ensure_venv(release.version, meta, root, pip or _pip, quiet)
    fi = requirement(meta, "flashinfer-python") or ""
    return Env(release.version, src, venv / "bin" / "python", fi.lstrip("=") if fi.startswith("==") else "0.7.2.post1")


def _ensure_src(release: Release, root: Path) -> Path:
    src = root / f"src-{release.version}"
    if (src / ".done").is_file():
        return src
    tmp = root / f".src-{release.version}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(release.wheel) as z:
        names = [n for n in z.namelist()
                 if not n.endswith(SKIP_SUFFIXES) and ".so." not in n and n != "vllm/vllm-rs"]
        z.extractall(tmp, names)
    (tmp / ".done").write_text(f"{len(names)} files from {release.wheel.name}\n")
    shutil.rmtree(src, ignore_errors=True)
    os.replace(tmp, src)
    return src


def _pip(python: Path, args: list[str]) -> None:
    env = {**os.environ, "PIP_CONSTRAINT": ""}  # a machine-wide constraint caps the project's torch, not this venv's
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True, env=env)


def _ensure_venv(version: str, metadata: str, root: Path, pip, quiet: bool) -> Path:
    venv = root / f"venv-{version}"
    if (venv / ".done").is_file():
        _ensure_extras(venv, metadata, pip, quiet)
        return venv
    tmp = root / f".venv-{version}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"oracle: building vLLM {version}'s CPU venv in {venv} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True)
    transformers = "transformers" + (ERA_TRANSFORMERS.get(version) or requirement(metadata, "transformers") or "")
    # venv's own paths (pyvenv.cfg, bin/python) resolve relative to it: the rename below keeps it usable
    extras = model_deps(metadata)
    pip(tmp / "bin" / "python", [TORCH, transformers, TRITON, *IMPORT_DEPS, *extras])
    (tmp / ".done").write_text(f"vllm {version}: {TORCH} {transformers} {TRITON}\n")
    (tmp / ".extras").write_text("\n".join(extras) + "\n")
    shutil.rmtree(venv, ignore_errors=True)
    os.replace(tmp, venv)
    return venv


def model_deps(metadata: str) -> list[str]:
    """MODEL_DEPS as pip requirements, each at the release's own pin where its METADATA has one."""
    return [name + (requirement(metadata, name) or "") for name in MODEL_DEPS]


def _ensure_extras(venv: Path, metadata: str, pip, quiet: bool) -> None:
    """A complete venv built before MODEL_DEPS: those added once, without dependencies (the venv's
    torch and transformers stay as they are)."""
    extras = model_deps(metadata)
    marker = venv / ".extras"
    if marker.is_file() and marker.read_text().split() == extras:
        return
    if not quiet:
        print(f"oracle: adding {', '.join(extras)} to {venv} (once)", file=sys.stderr, flush=True)
    pip(venv / "bin" / "python", ["--no-deps", *extras])
    tmp = venv / f".extras.tmp-{os.getpid()}"
    tmp.write_text("\n".join(extras) + "\n")
    os.replace(tmp, marker)
