"""The card a tensor or device is on, by the name its driver gives: the key of the kernels' per-card tables
(skinny_gemm's configs, triton_paged's small launch)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def card_name(device: torch.device) -> str:
    """The driver's name of `device`; "cpu" off the GPU."""
    if device.type != "cuda":
        return "cpu"
    return _device_name(device.index if device.index is not None else torch.cuda.current_device())


def card_of(t: torch.Tensor) -> str:
    """The card t lives on (card_name of its device)."""
    return card_name(t.device)
