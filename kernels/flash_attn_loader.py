"""Import the FlashAttention builds lazily, with one-line messages naming what to install.

Raises ImportError (the backend adapter turns it into BackendUnavailableError), or ValueError for
a bad KSELECT_FA3_BUILD.

FA3 has two builds of the same kernels: vLLM's (`vllm.vllm_flash_attn`, verified in
conf/conformance/nvidia_h200.yaml) and upstream flash-attention's `hopper/` (package
`flash_attn_3`, module `flash_attn_interface`; no wheel of it has paged KV for torch 2.11 /
CUDA 13, so build it: kselect/measurement/builds/build_fa3_hopper.sh). KSELECT_FA3_BUILD picks one; unset (or
"auto") takes vLLM's when importable, else upstream's. The backend reports which one runs.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import NamedTuple

VLLM_PKG = "vllm.vllm_flash_attn"  # vLLM's FA3 library and FA4 fork: only this part of vLLM is needed
VLLM_FA = VLLM_PKG + ".flash_attn_interface"
UPSTREAM_FA3 = "flash_attn_interface"  # flash-attention hopper/ build; imports flash_attn_3._C
UPSTREAM_FA4 = "flash_attn.cute"
FA3_BUILD_ENV = "KSELECT_FA3_BUILD"
FA3_BUILDS = ("vllm", "upstream")


class Fa3Build(NamedTuple):
    name: str  # "vllm" | "upstream"
    module: object
    disabled: frozenset = frozenset()  # upstream: features compiled out (FP16, HDIM128, LOCAL, ...)

    @property
    def label(self) -> str:
        return {"vllm": VLLM_PKG, "upstream": "flash_attn_3 (flash-attention hopper build)"}[self.name]


def _load(module: str, need: str, *, shown: str | None = None, cute: bool = False):
    """Import `module`, or raise one ImportError line saying what `need`s it and where to get it."""
    if cute:  # the CuTe-DSL compile cache makes later processes skip the 2-6 s JIT per kernel variant
        os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
        quiet_cute_aux_data()
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{need} (module {shown or module}, see README 'GPU kernels'): {e}") from e


def quiet_cute_aux_data() -> None:
    """Silence one known CuTe-DSL UserWarning. Every FA4 compile passes the kernel's `aux_data`
    argument (a Python object the DSL cannot turn into a JIT argument); the DSL then treats it as a
    compile-time value and warns, once per kernel variant, in a paragraph-long message. The kernels
    are unaffected (every FA4 claim kselect relies on is checked against the reference in
    conf/conformance/nvidia_h200.yaml), so only that message is filtered; any other warning shows."""
    warnings.filterwarnings("ignore", message=r"Argument aux_data \(position \d+\) cannot be converted to a JitArgument",
                            category=UserWarning)


def fa3_build_choice(choice: str | None = None) -> str:
    """`choice`, else KSELECT_FA3_BUILD: 'vllm', 'upstream', or 'auto' (also when unset or empty)."""
    given = os.environ.get(FA3_BUILD_ENV, "") if choice is None else choice
    raw = given.strip().lower() or "auto"
    if raw not in FA3_BUILDS + ("auto",):
        raise ValueError(f"{FA3_BUILD_ENV}={given!r}: allowed values are auto, vllm, upstream")
    return raw


def _load_fa3_vllm() -> Fa3Build:
    return Fa3Build("vllm", _load(VLLM_FA, "FLASH_ATTN v3 needs vLLM's FA3 build", shown=VLLM_PKG))


def _load_fa3_upstream() -> Fa3Build:
    mod = _load(UPSTREAM_FA3, "FLASH_ATTN v3 needs an FA3 build: flash-attention's hopper/ "
                              "(kselect/measurement/builds/build_fa3_hopper.sh)")
    return Fa3Build("upstream", mod, _compiled_out())


def _compiled_out() -> frozenset:
    """Features the hopper build was compiled without, from the flash_attn_config module its setup.py
    writes (FLASHATTENTION_DISABLE_<X> -> X). Its stable-ABI checks abort the process instead of
    raising, so the adapter has to refuse these itself."""
    try:
        flags = importlib.import_module("flash_attn_config").CONFIG["build_flags"]
    except (ImportError, AttributeError, KeyError, TypeError):
        return frozenset()
    return frozenset(k.split("DISABLE_", 1)[1] for k, v in flags.items() if v and "DISABLE_" in k)


def load_fa3(choice: str | None = None) -> Fa3Build:
    """The FA3 build `choice` (else KSELECT_FA3_BUILD) names; on 'auto', vLLM's if importable, else upstream's."""
    choice = fa3_build_choice(choice)
    if choice == "vllm":
        return _load_fa3_vllm()
    if choice == "upstream":
        return _load_fa3_upstream()
    try:
        return _load_fa3_vllm()
    except ImportError as e_vllm:
        try:
            return _load_fa3_upstream()
        except ImportError as e_up:
            raise ImportError(f"FLASH_ATTN v3 needs an FA3 build: vLLM's ({VLLM_PKG}) or flash-attention's hopper/ "
                              f"({UPSTREAM_FA3}, kselect/measurement/builds/build_fa3_hopper.sh); "
                              "see README 'GPU kernels' "
                              f"[{VLLM_PKG}: {e_vllm.__cause__}; {UPSTREAM_FA3}: {e_up.__cause__}]") from e_up


def load_fa4_upstream():
    return _load(UPSTREAM_FA4, "FLASH_ATTN v4 needs flash-attn-4==4.0.0b36 (pip extra 'gpu')", cute=True)


def load_fa4_fork():
    return _load(VLLM_FA, "FLASH_ATTN v4 at head dim 512 or with an FP8 KV cache needs vLLM's FA4 fork",
                 shown=VLLM_PKG, cute=True)
