"""Dtype names <-> torch dtypes, declared once for the torch side (the selector's names:
`bfloat16`, `float16`, `float32`, `fp8_e4m3`, `fp8_e5m2`, with the short and torch spellings)."""

from __future__ import annotations

import torch

# each dtype's first spelling is the selector's name for it (dtype_name)
TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn, "fp8": torch.float8_e4m3fn, "float8_e4m3fn": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2,
}  # fmt: skip
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_NAMES: dict[torch.dtype, str] = {}
for _name, _dtype in TORCH_DTYPES.items():
    _NAMES.setdefault(_dtype, _name)


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """Any accepted spelling (or a torch dtype) -> the torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return TORCH_DTYPES[str(name).removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; use one of {sorted(TORCH_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype -> the selector's name (`bfloat16`, `fp8_e4m3`, ...)."""
    return _NAMES[dtype]


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def kv_torch_dtype(name: str | None, model_dtype: torch.dtype) -> torch.dtype:
    """A KV-cache dtype name (`auto`/None: the model's) -> the cache's torch dtype."""
    return model_dtype if name in (None, "auto") else torch_dtype(name)
