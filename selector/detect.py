"""`platform=auto`: detect this machine. The only module of the selector that may import torch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

PLATFORM_DIR = Path(__file__).resolve().parent.parent / "conf" / "platform"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import
        return False


def detect_platform() -> dict:
    """The preset matching this machine, with the kernel packages actually importable."""
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
    gpu = torch.cuda.get_device_name().lower().replace("nvidia ", "nvidia_").replace(" ", "_").replace("-", "_")
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
        },
    }
