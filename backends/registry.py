"""Backend name (as the selector picks it) -> implementation, imported lazily. Never falls back."""

from __future__ import annotations

import importlib

from .base import AttentionBackend, BackendUnavailableError
from ..selector.outputs.selection import GroupSelection

# Backends the selector may pick that kselect does not implement.
NOT_IMPLEMENTED = {
    "FLEX_ATTENTION": "torch FlexAttention",
    "TURBOQUANT": "TurboQuant",
}

_IMPLS = {
    ("TORCH_REFERENCE", None): "kselect.backends.reference:TorchReferenceBackend",
    ("TRITON_ATTN", None): "kselect.backends.triton:TritonAttnBackend",
    ("FLASH_ATTN", 3): "kselect.backends.flash_attn:FlashAttn3Backend",
    ("FLASH_ATTN", 4): "kselect.backends.flash_attn:FlashAttn4Backend",
    ("FLASHINFER", None): "kselect.backends.flashinfer:FlashInferBackend",
    # vLLM 0.33.0's composites: Triton for batches with image spans, the causal child otherwise
    ("TRITON_FLASH_ATTN", None): "kselect.backends.composite:CompositeBackend",
    ("TRITON_FLASHINFER", None): "kselect.backends.composite:CompositeBackend",
}


def make_backend(group: GroupSelection) -> AttentionBackend:
    name = group.backend
    if name in NOT_IMPLEMENTED:
        raise BackendUnavailableError(
            f"{name} is not implemented in kselect (would need {NOT_IMPLEMENTED[name]}); "
            "select TRITON_ATTN, FLASH_ATTN, FLASHINFER or TORCH_REFERENCE")
    key = (name, group.flash_attn_version if name == "FLASH_ATTN" else None)
    if key not in _IMPLS:
        if name == "FLASH_ATTN":
            raise BackendUnavailableError(
                f"FLASH_ATTN v{group.flash_attn_version} is not implemented (kselect has versions 3 and 4)")
        raise BackendUnavailableError(f"unknown attention backend {name!r} (known: {sorted({k for k, _ in _IMPLS})})")
    module, cls = _IMPLS[key].split(":")
    try:
        impl = getattr(importlib.import_module(module), cls)
    except ImportError as e:  # the adapter module itself imports its kernel package
        raise BackendUnavailableError(f"{group.label}: cannot import {module}: {e}") from e
    return impl(group)  # adapters raise BackendUnavailableError naming the package they need
