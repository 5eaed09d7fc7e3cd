"""Building blocks of the config schema: the strict base model and bounded values."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from ..config.vocab import MODEL_DTYPES

ModelDtype = Literal[MODEL_DTYPES]  # type: ignore[valid-type]
KVDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
Device = Literal["cuda", "rocm", "xpu", "cpu"]
RULE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # one segment of a Hydra override key


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------- bounded values
# Every size is bounded so that nothing is allocated from an unchecked number (the largest
# published Gemma-4 values are far inside: vocab 262,144, hidden 5,376, 60 layers, head 512).
# YAML's own coercions stay (`yes` -> true, `64.0` -> 64; see the README), but a boolean is
# never a number.


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got the boolean {v}")
    return v


def Int(ge: int, le: int) -> Any:  # noqa: N802 - a type
    return Annotated[int, BeforeValidator(_no_bool), Field(ge=ge, le=le)]


def Float(gt: float, le: float) -> Any:  # noqa: N802 - a type
    return Annotated[float, BeforeValidator(_no_bool), Field(gt=gt, le=le)]


MAX_VOCAB = 1 << 21
MAX_HIDDEN = 1 << 16
MAX_INTERMEDIATE = 1 << 18
MAX_LAYERS = 512
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_POSITIONS = 1 << 24
MAX_EXPERTS = 1024
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
GpuModel = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_]{0,63}$")]
CC = tuple[Int(1, 15), Int(0, 9)]  # compute capability (major, minor)


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError(f"got the empty path {v!r}; allowed: null (no checkpoint) or a folder / Hugging Face repo id")
    return v


# `checkpoint: ''` would read as "no checkpoint" where one was meant: say so instead
Checkpoint = Annotated[str, AfterValidator(_not_blank)]
