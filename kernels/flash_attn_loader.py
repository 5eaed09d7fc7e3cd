"""Import the FlashAttention builds lazily, with one-line messages naming what to install.

Raises ImportError (the backend adapter turns it into BackendUnavailableError).
"""

from __future__ import annotations

import importlib
import os

VLLM_PKG = "vllm.vllm_flash_attn"  # vLLM's FA3 library and FA4 fork: only this part of vLLM is needed
VLLM_FA = VLLM_PKG + ".flash_attn_interface"
UPSTREAM_FA4 = "flash_attn.cute"


def _load(module: str, need: str, *, shown: str | None = None, cute: bool = False):
    """Import `module`, or raise one ImportError line saying what `need`s it and where to get it."""
    if cute:  # the CuTe-DSL compile cache makes later processes skip the 2-6 s JIT per kernel variant
        os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{need} (module {shown or module}, see README 'GPU kernels'): {e}") from e


def load_fa3():
    """FA3 = vLLM's build (fa_version=3): paged KV, window, FP8 with descales. The upstream hopper
    build (`flash_attn_interface`) is not accepted: no installable wheel of it has paged KV for this
    torch/CUDA (fa3-fwd 0.0.3 refuses paged KV and windows), so that path could not be verified."""
    return _load(VLLM_FA, "FLASH_ATTN v3 needs vLLM's FA3 build", shown=VLLM_PKG)


def load_fa4_upstream():
    return _load(UPSTREAM_FA4, "FLASH_ATTN v4 needs flash-attn-4==4.0.0b36 (pip extra 'gpu')", cute=True)


def load_fa4_fork():
    return _load(VLLM_FA, "FLASH_ATTN v4 at head dim 512 or with an FP8 KV cache needs vLLM's FA4 fork",
                 shown=VLLM_PKG, cute=True)
