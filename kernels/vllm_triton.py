"""Load vLLM's unified Triton attention (`unified_attention`, vllm/v1/attention/ops/triton_unified_attention.py,
the kernel vLLM's TRITON_ATTN backend calls) from a release's own Python source, without importing vLLM.

The module imports a few small vLLM pieces at its top (vllm.envs, vllm.logger, vllm.platforms,
vllm.triton_utils, vllm.v1.kv_cache_interface); importing vLLM itself pulls its whole runtime
(and `pip install vllm` replaces torch). So the two kernel files are executed from the release's
source under private module names, with those pieces provided here: the settings at their defaults
(no batch invariance), the platform as CUDA/CPU (no ROCm tuning, torch's float8_e4m3fn as FP8), and
KVQuantMode read from the release's own kv_cache_interface.py (only that class). The kernel source
is never copied into this repository.

Where the source comes from, first hit wins:
- `KSELECT_VLLM_TRITON_SRC`: a directory holding `vllm/v1/attention/ops/...` (an unpacked wheel, a
  vLLM checkout, or the cache below), or a vLLM `.whl` (its files are extracted to the cache);
- the cache `~/.cache/kselect/vllm-triton/<release>/` (`KSELECT_CACHE` moves `~/.cache/kselect`), filled
  by `python -m kselect.kernels.vllm_triton_fetch --release <release>`, which checks every file against
  the sha256 in kernels/vllm_triton_sources.json.
The release is `KSELECT_VLLM_RELEASE`, default DEFAULT_RELEASE (the release conf/config.yaml's rules model).
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib.util
import logging
import os
import re
import sys
import threading
import types
import zipfile
from pathlib import Path
from typing import NamedTuple

DEFAULT_RELEASE = "0.34.0"
RELEASE_ENV = "KSELECT_VLLM_RELEASE"
SRC_ENV = "KSELECT_VLLM_TRITON_SRC"
OPS = "vllm/v1/attention/ops/"
KERNEL = OPS + "triton_unified_attention.py"
HELPERS = OPS + "triton_attention_helpers.py"
QUANT = "vllm/v1/kv_cache_interface.py"  # only its KVQuantMode enum is read
BACKEND = "vllm/v1/attention/backends/triton_attn.py"  # only its launch constants are read
FILES = (KERNEL, HELPERS, QUANT, BACKEND)
# the metadata builder's constants (TritonAttentionMetadataBuilder): 2D launch floor and split-K segments
BUILDER_CONSTANTS = ("MIN_LAUNCH_GRID_SIZE_2D", "NUM_PAR_SOFTMAX_SEGMENTS")
_LOCK = threading.Lock()
_LOADED: dict[Path, "VllmTriton"] = {}


class VllmTriton(NamedTuple):
    unified_attention: object  # the release's function, called as vLLM's TritonAttentionImpl.forward calls it
    kv_quant_mode: type  # the release's KVQuantMode
    max_3d_query_len: int  # MAX_3D_QUERY_LEN: the longest query split-K runs
    min_launch_grid_2d: int  # MIN_LAUNCH_GRID_SIZE_2D (triton_attn.py): seq_threshold_3D = this // num_kv_heads
    num_par_softmax_segments: int  # NUM_PAR_SOFTMAX_SEGMENTS (triton_attn.py): split-K segments per sequence
    release: str  # the vLLM version the source came from
    source: Path

    @property
    def label(self) -> str:
        return f"vllm {self.release} triton_unified_attention"


def release() -> str:
    r = os.environ.get(RELEASE_ENV, "").strip() or DEFAULT_RELEASE
    if not re.fullmatch(r"\d+\.\d+\.\d+", r):
        raise ValueError(f"{RELEASE_ENV}={r!r}: a vLLM release version such as {DEFAULT_RELEASE}")
    return r


def cache_root() -> Path:
    return Path(os.environ.get("KSELECT_CACHE") or Path.home() / ".cache" / "kselect") / "vllm-triton"


def fetch_hint(rel: str) -> str:
    return (f"fetch it with `python -m kselect.kernels.vllm_triton_fetch --release {rel}` (downloads the vllm=={rel} "
            f"wheel, keeps only {len(FILES)} files), or point {SRC_ENV} at a vLLM {rel} wheel or unpacked source")


def source_dir(rel: str | None = None) -> Path:
    """The directory holding the release's files (a wheel given in SRC_ENV is extracted to the cache first)."""
    rel = rel or release()
    given = os.environ.get(SRC_ENV, "").strip()
    if given:
        p = Path(given).expanduser()
        if p.is_file() and p.suffix == ".whl":
            return extract_wheel(p, cache_root() / wheel_version(p))
        if not (p / KERNEL).is_file():
            raise ImportError(f"{SRC_ENV}={given!r} holds no {KERNEL}: give a vLLM .whl or a directory with vllm/ in it")
        return p
    p = cache_root() / rel
    if not all((p / f).is_file() for f in FILES):
        raise ImportError(f"TRITON_ATTN runs vLLM {rel}'s Triton kernel, whose source is not here ({p}): {fetch_hint(rel)}")
    return p


def wheel_version(wheel: Path) -> str:
    m = re.match(r"vllm-(\d+\.\d+\.\d+)-", wheel.name)
    if not m:
        raise ImportError(f"{SRC_ENV}={str(wheel)!r}: not a vllm-<version>-*.whl file name")
    return m.group(1)


def extract_wheel(wheel: Path, dest: Path) -> Path:
    """Extract FILES of `wheel` into dest (atomically: a rename of a finished directory)."""
    if all((dest / f).is_file() for f in FILES):
        return dest
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(wheel) as z:
        for f in FILES:
            z.extract(f, tmp)  # keeps paths inside tmp
        (tmp / "VERSION").write_text(wheel_version(wheel) + "\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first, or dest exists half-made: keep the complete one
        if not all((dest / f).is_file() for f in FILES):
            raise
    return dest


def source_release(src: Path) -> str:
    """The vLLM version of a source directory: the cache's VERSION file or the wheel's dist-info."""
    v = src / "VERSION"
    if v.is_file():
        return v.read_text().strip()
    for meta in src.glob("vllm-*.dist-info/METADATA"):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def load(rel: str | None = None) -> VllmTriton:
    """The release's unified_attention (loaded once per source directory). ImportError says what is missing."""
    try:
        import triton  # noqa: F401, PLC0415 - the kernel's own dependency
    except ImportError as e:
        raise ImportError(f"TRITON_ATTN needs the triton package (pip install triton): {e}") from e
    src = source_dir(rel).resolve()
    with _LOCK:
        hit = _LOADED.get(src)
        if hit is None:
            hit = _LOADED[src] = _exec(src)
    return hit


def _kv_quant_mode(path: Path) -> type:
    """The release's KVQuantMode: that one class of kv_cache_interface.py, executed alone (its module
    imports vLLM's config machinery; the enum itself needs only IntEnum)."""
    tree = ast.parse(path.read_text(), str(path))
    cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVQuantMode"]
    if not cls:
        raise ImportError(f"{path} defines no KVQuantMode")
    ns: dict = {"IntEnum": enum.IntEnum, "__name__": "kselect_vllm_kv_quant"}
    exec(compile(ast.Module(body=cls, type_ignores=[]), str(path), "exec"), ns)  # noqa: S102 - the release's enum
    return ns["KVQuantMode"]


def _constants(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Module-level `NAME = <int literal>` assignments of a file, read without executing it."""
    found = {}
    for n in ast.parse(path.read_text(), str(path)).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            if n.targets[0].id in names:
                found[n.targets[0].id] = ast.literal_eval(n.value)
    missing = set(names) - set(found)
    if missing:
        raise ImportError(f"{path} sets no {', '.join(sorted(missing))}")
    return found


class _Logger(logging.LoggerAdapter):
    def debug_once(self, msg, *args, **kw):
        self.debug(msg, *args)

    def info_once(self, msg, *args, **kw):
        self.info(msg, *args)

    def warning_once(self, msg, *args, **kw):
        self.warning(msg, *args)


class _Platform:
    """What the kernel asks vLLM's current_platform: CUDA (or the CPU interpreter), never ROCm/XPU."""

    @staticmethod
    def fp8_dtype():
        import torch  # noqa: PLC0415

        return torch.float8_e4m3fn

    @staticmethod
    def is_rocm() -> bool:
        return False

    @staticmethod
    def is_cuda() -> bool:
        import torch  # noqa: PLC0415

        return torch.cuda.is_available()

    @staticmethod
    def is_device_capability_family(cap: int) -> bool:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            return False
        major, minor = torch.cuda.get_device_capability()
        return (major * 10 + minor) // 10 == cap // 10


def _stubs(src: Path) -> dict[str, types.ModuleType]:
    import triton  # noqa: PLC0415
    import triton.language as tl  # noqa: PLC0415

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    envs = mod("vllm.envs", VLLM_BATCH_INVARIANT=False, VLLM_TRITON_USE_TD=None)
    return {
        "vllm": mod("vllm", __path__=[]),
        "vllm.envs": envs,
        "vllm.logger": mod("vllm.logger", init_logger=lambda name: _Logger(logging.getLogger(name), {})),
        "vllm.platforms": mod("vllm.platforms", current_platform=_Platform()),
        "vllm.triton_utils": mod("vllm.triton_utils", triton=triton, tl=tl),
        "vllm.v1": mod("vllm.v1", __path__=[]),
        "vllm.v1.attention": mod("vllm.v1.attention", __path__=[]),
        "vllm.v1.attention.ops": mod("vllm.v1.attention.ops", __path__=[]),
        "vllm.v1.kv_cache_interface": mod("vllm.v1.kv_cache_interface", KVQuantMode=_kv_quant_mode(src / QUANT)),
    }


def _exec_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)  # the real file: Triton's JIT reads its source
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


def _exec(src: Path) -> VllmTriton:
    """Execute the helpers and the kernel module with the stubs in sys.modules only while they import;
    the names are restored after, so a real vLLM (or vllm.vllm_flash_attn) in this process is untouched."""
    stubs = _stubs(src)
    rel = source_release(src)
    # a private name per source, the same in every process (Triton's on-disk compile cache stays warm across them)
    private = f"kselect_vllm_triton_{re.sub(r'[^0-9a-zA-Z]', '_', rel)}_{hashlib.sha1(str(src).encode()).hexdigest()[:8]}"
    helpers_name = "vllm.v1.attention.ops.triton_attention_helpers"
    saved = {k: sys.modules.get(k) for k in (*stubs, helpers_name)}
    try:
        sys.modules.update(stubs)
        sys.modules[helpers_name] = _exec_file(private + ".triton_attention_helpers", src / HELPERS)
        kernel = _exec_file(private + ".triton_unified_attention", src / KERNEL)
    except ImportError as e:
        raise ImportError(f"vLLM {rel}'s {KERNEL} ({src}) needs a vLLM piece kselect does not provide: {e}") from e
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    const = _constants(src / BACKEND, BUILDER_CONSTANTS)
    return VllmTriton(kernel.unified_attention, stubs["vllm.v1.kv_cache_interface"].KVQuantMode,
                      int(getattr(kernel, "MAX_3D_QUERY_LEN", 1)), const["MIN_LAUNCH_GRID_SIZE_2D"],
                      const["NUM_PAR_SOFTMAX_SEGMENTS"], rel, src)
