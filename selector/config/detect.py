"""`platform=auto`: detect this machine. The only module of the selector that may import torch."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import sys
from pathlib import Path

import yaml

from ..base.errors import KSelectError

PLATFORM_DIR = Path(__file__).resolve().parents[2] / "conf" / "platform"


def platform_keys(overrides) -> list[tuple[str, ...]]:
    """The `platform.*` keys a command line sets (Hydra's own override parser)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415

    out = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group
        if key.startswith("platform."):
            if o.is_delete():
                raise KSelectError(
                    f"invalid config: ~{key}: platform=auto fills every platform key from the detected machine; "
                    "a platform key can be set (platform.<key>=value), not deleted"
                )
            out.append(tuple(key.split(".")[1:]))
    return out


def auto_platform(composed: dict, overrides=(), conf_dir: Path | None = None) -> dict:
    """`platform=auto`: the detected machine, then every platform key the command line sets or
    that an overlay changed from conf/platform/auto.yaml, taken from the composed config (so
    `platform=auto platform.packages.triton=true` keeps the override)."""
    preset = yaml.safe_load(((conf_dir / "platform") if conf_dir else PLATFORM_DIR).joinpath("auto.yaml").read_text())
    keys = set(platform_keys(overrides)) | set(_changed(composed, preset))
    out = copy.deepcopy(detect_platform())
    for path in sorted(keys):
        if path == ("name",):
            continue  # name: auto is what asked for detection
        value, node = composed, out
        for p in path:
            value = value[p] if isinstance(value, dict) and p in value else _MISSING
        if value is _MISSING:
            raise KSelectError(f"invalid config: platform.{'.'.join(path)}: not a key of the platform config")
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = copy.deepcopy(value)
    return out


_MISSING = object()


def _changed(a: dict, b: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Leaf paths where `a` differs from `b`."""
    out = []
    for k, v in a.items():
        if isinstance(v, dict) and isinstance(b.get(k), dict):
            out += _changed(v, b[k], (*prefix, k))
        elif k not in b or b[k] != v:
            out.append((*prefix, k))
    return out


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import
        return False


def gpu_model_key(device_name: str) -> str:
    """A device's name as conformance and perf files are keyed (conf/conformance/<key>.yaml; schema GpuModel):
    "NVIDIA H100 80GB HBM3" -> nvidia_h100_80gb_hbm3, the key the h100 preset names."""
    name = device_name.lower().replace("nvidia ", "nvidia_")
    return re.sub(r"[^a-z0-9_]", "_", name).strip("_")[:64]


# Device nodes through which a Linux process reaches a GPU: NVIDIA's driver, WSL2's GPU, AMD's ROCm. With none of them
# torch.cuda.is_available() is False, so platform=auto answers "cpu" without importing torch (about a second).
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version", "/dev/dxg", "/dev/kfd")


def no_gpu_reachable() -> bool:
    """Whether this is a Linux machine with none of GPU_NODES (elsewhere torch decides)."""
    return sys.platform.startswith("linux") and not any(os.path.exists(p) for p in GPU_NODES)


def detect_platform() -> dict:
    """The preset matching this machine, with the kernel packages actually importable."""
    if no_gpu_reachable():
        return yaml.safe_load((PLATFORM_DIR / "cpu.yaml").read_text())
    try:
        import torch  # noqa: PLC0415 - only platform=auto needs it

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        return yaml.safe_load((PLATFORM_DIR / "cpu.yaml").read_text())
    major, minor = torch.cuda.get_device_capability()
    preset = {8: "sm80", 9: "sm90", 10: "sm100", 12: "sm120"}.get(major)
    base = yaml.safe_load((PLATFORM_DIR / f"{preset}.yaml").read_text()) if preset else {}
    gpu = gpu_model_key(torch.cuda.get_device_name())
    return {
        "name": preset or f"sm{major}{minor}",
        "vendor": "nvidia",
        "device": "cuda",
        "compute_capability": [major, minor],
        "gpu_model": gpu or base.get("gpu_model"),
        "packages": {
            "fa2": _has("flash_attn_2_cuda") or _has("vllm.vllm_flash_attn"),
            "fa3": _has("vllm.vllm_flash_attn") or _has("flash_attn_interface"),
            "fa4": _has("flash_attn.cute"),
            "flashinfer": _has("flashinfer"),
            "triton": _has("triton"),
            "fa3_upstream": _has("flash_attn_3"),
            "kselect_triton": _has("triton"),  # kselect's own kernel needs only triton
        },
    }
