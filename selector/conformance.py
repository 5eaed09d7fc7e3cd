"""Capability claims and what hardware said about them.

A selected group runs a kernel path that relies on claims such as
`FLASH_ATTN_v4:fp8:d256:window`. `kernels.conformance` runs each claim on a real GPU and
writes `conf/conformance/<gpu_model>.yaml`; the selector marks every claim of a selection
as verified, refuted or unverified from that file (no file: unverified).
"""

from __future__ import annotations

import functools
from pathlib import Path

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import format_validation_error
from .files import FileError, load_yaml
from .selection import ClaimCheck

CONFORMANCE_DIR = Path(__file__).resolve().parent.parent / "conf" / "conformance"
_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}


CLAIM_ID = r"^[A-Z][A-Z0-9_]*?(?:_v\d+)?:(?:bf16|fp16|fp32|fp8_e5m2|fp8):d\d{1,4}:(?:causal|window|mm_prefix|sinks|quant_query|page\d{1,4})$"
Status = Literal["verified", "refuted", "unsupported"]


class ClaimResult(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    status: Status
    rel_err: float | None = Field(default=None, ge=0)
    detail: str = ""
    kernel: str = ""  # which library build ran, where the backend has several (FA3: vLLM's or upstream's)


class ConformanceFile(BaseModel):
    """conf/conformance/<gpu_model>.yaml. `claim_count` is written before the claims, so a file
    cut short (a killed writer, a bad copy) no longer matches it and is refused."""

    model_config = ConfigDict(extra="forbid")
    gpu: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,63}$")
    torch: str = ""
    measured: str = ""
    commit: str = ""
    command: str = ""
    claim_count: int = Field(ge=0)
    claims: dict[Annotated[str, Field(pattern=CLAIM_ID)], ClaimResult]

    @model_validator(mode="after")
    def _complete(self) -> ConformanceFile:
        if len(self.claims) != self.claim_count:
            raise ValueError(
                f"claim_count is {self.claim_count} but the file holds {len(self.claims)} claims "
                "(cut short, or edited by hand); allowed: re-run kselect conformance, or fix claim_count"
            )
        return self


def path_id(backend: str, version: int | None) -> str:
    return f"{backend}_v{version}" if version else backend


def claims_for(fields: dict, model_dtype: str) -> list[str]:
    """The claims a group's kernel path relies on."""
    dt = _SHORT[fields["kv_cache_dtype"]] if fields["kv_cache_dtype"].startswith("fp8") else _SHORT[model_dtype]
    base = f"{path_id(fields['backend'], fields['flash_attn_version'])}:{dt}:d{fields['head_size']}"
    feats = ["causal", f"page{fields['kernel_block_size']}"]
    if fields["sliding_window"]:
        feats.append("window")
    if fields["mm_prefix"]:
        feats.append("mm_prefix")
    if fields["quant_query"]:
        feats.append("quant_query")
    return [f"{base}:{x}" for x in feats]


def load(gpu_model: str) -> ConformanceFile | None:
    """The measured file of a GPU model, None when there is none; any other problem (empty,
    truncated, a dangling symlink, a bad status) is an error naming the file."""
    path = CONFORMANCE_DIR / f"{gpu_model}.yaml"
    try:
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        if not path.is_symlink():
            return None
        key = (-1, -1)  # dangling: read_file says so
    return _load(path, key)


@functools.lru_cache(maxsize=32)
def _load(path: Path, _key: tuple) -> ConformanceFile:
    return read_file(path)


load.cache_clear = _load.cache_clear  # type: ignore[attr-defined]


def read_file(path: Path | str, gpu: str | None = None) -> ConformanceFile:
    path = Path(path)
    what = "a conformance file (written by kselect conformance)"
    data = load_yaml(path, what)
    if data is None:
        raise FileError(f"{path}: empty; expected {what}")
    if not isinstance(data, dict):
        raise FileError(f"{path}: a {type(data).__name__}; expected {what}")
    try:
        out = ConformanceFile.model_validate(data)
    except ValidationError as e:
        raise FileError(f"{path}: {format_validation_error(e).removeprefix('invalid config: ')}") from None
    want = gpu or path.stem
    if out.gpu != want:
        raise FileError(f"{path}: gpu is {out.gpu!r}; allowed: {want!r} (the file name is the GPU model)")
    return out


def claim_checks(platform, fields: dict, model_dtype: str) -> tuple[tuple[ClaimCheck, ...], list[str]]:
    data = load(platform.gpu_model) if platform.gpu_model else None
    where = platform.gpu_model or platform.name
    checks, refuted, unverified = [], [], []
    for claim in claims_for(fields, model_dtype):
        res = data.claims.get(claim) if data else None
        if res is None or res.detail.startswith("unavailable"):  # never run: the package was missing
            checks.append(ClaimCheck(claim=claim, status="unverified"))
            unverified.append(claim)
        elif res.status == "verified":
            checks.append(ClaimCheck(claim=claim, status="verified", detail=_detail(res)))
        else:
            checks.append(ClaimCheck(claim=claim, status="refuted", detail=_detail(res)))
            refuted.append(f"{claim} ({_detail(res)})")
    warnings = []
    if refuted:
        warnings.append(f"REFUTED on {where}: {'; '.join(refuted)} [conformance]")
    if unverified:
        warnings.append(f"unverified on {where}: {', '.join(unverified)} [conformance]")
    return tuple(checks), warnings


def _detail(res: ClaimResult) -> str:
    err = f"rel err {res.rel_err:.2g}" if res.rel_err is not None else ""
    kernel = f"on {res.kernel}" if res.kernel else ""
    return ", ".join(x for x in (res.status, err, kernel, res.detail) if x)
