"""Accuracy bar for every kernel-vs-reference comparison (tests, conformance), in one place.

rel_err = ||out - ref|| / ||ref|| over the whole output, both in fp32; the reference runs in fp32
on the same (dequantized) inputs. Non-finite output never passes.
"""

from __future__ import annotations

import math

import torch

TOLERANCE = {
    "float32": 1e-4,
    "float16": 1e-2,  # 10-bit mantissa on inputs and output
    "bfloat16": 2e-2,  # 7-bit mantissa
    "fp8": 6e-2,  # FP8 caches / quant-query; FA3 also rounds P to fp8 (measured ~2e-2)
}


def tolerance(model_dtype: torch.dtype, fp8: bool = False) -> float:
    if fp8:
        return TOLERANCE["fp8"]
    return TOLERANCE[str(model_dtype).removeprefix("torch.")]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.float(), ref.float()
    if not bool(torch.isfinite(out).all()):
        return math.nan
    den = ref.norm().item()
    num = (out - ref).norm().item()
    return num / den if den > 0 else num


def passes(err: float, tol: float) -> bool:
    return not math.isnan(err) and err <= tol
