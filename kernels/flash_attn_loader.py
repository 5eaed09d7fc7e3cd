"""Import the FlashAttention builds lazily, with one-line messages naming what to install.

Raises ImportError (the backend adapter turns it into BackendUnavailableError).
"""

from __future__ import annotations

import importlib
import os

VLLM_FA = "vllm.vllm_flash_attn.flash_attn_interface"
UPSTREAM_FA4 = "flash_attn.cute"


def _import(module: str):
    return importlib.import_module(module)


def load_fa3():
    """FA3 = vLLM's build (fa_version=3): paged KV, window, FP8 with descales. The upstream hopper
    build (`flash_attn_interface`) is not accepted: no installable wheel of it has paged KV for this
    torch/CUDA (fa3-fwd 0.0.3 refuses paged KV and windows), so that path could not be verified."""
    try:
        return _import(VLLM_FA)
    except ImportError as e:
        raise ImportError(
            f"FLASH_ATTN v3 needs vLLM's FA3 build (module vllm.vllm_flash_attn, see README 'GPU kernels'): {e}") from e


def load_fa4_upstream():
    # The CuTe-DSL compile cache makes later processes skip the 2-6 s JIT per kernel variant.
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    try:
        return _import(UPSTREAM_FA4)
    except ImportError as e:
        raise ImportError(
            f"FLASH_ATTN v4 needs flash-attn-4==4.0.0b36 (module flash_attn.cute, pip extra 'gpu'; "
            f"see README 'GPU kernels'): {e}") from e


def load_fa4_fork():
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    try:
        return _import(VLLM_FA)
    except ImportError as e:
        raise ImportError(
            f"FLASH_ATTN v4 at head dim 512 or with an FP8 KV cache needs vLLM's FA4 fork "
            f"(module vllm.vllm_flash_attn, see README 'GPU kernels'): {e}") from e
