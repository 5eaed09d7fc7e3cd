"""Capability claims and what hardware said about them.

A selected group runs a kernel path that relies on claims such as
`FLASH_ATTN_v4:fp8:d256:window`. `kselect conformance` (kselect/measurement/conformance.py) runs each claim on a real GPU and
writes `conf/conformance/<gpu_model>.yaml`; the selector marks every claim of a selection
as verified, refuted or unverified from that file (no file: unverified). Which file: the caller's
Evidence (evidence.py), read from the composed config's conf directory.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..base.errors import format_validation_error
from ..config.compose import CONF_DIR
from ..base.files import FileError, load_yaml
from ..outputs.records import ClaimCheck, ClaimsWarning
from ..config.vocab import CLAIM_RE, Claim, check_build, claim_dtype

CONFORMANCE_DIR = CONF_DIR / "conformance"  # the bundled files (kselect conformance writes here by default)


CLAIM_ID = rf"^{CLAIM_RE}$"
Status = Literal["verified", "refuted", "unsupported", "unavailable"]


class ClaimResult(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # unavailable: never run here (the backend's package is missing); unsupported: the adapter or kernel refused
    status: Status
    rel_err: float | None = Field(default=None, ge=0)
    detail: str = ""
    kernel: str = ""  # which library build ran, where the backend has several (FA3: vLLM's or upstream's)
    # the kernel library's version where it is no installed distribution's ({"vllm": "0.33.0"} for vLLM's Triton
    # kernel run from that release's source, {"kselect": ...} for TRITON_ATTN+kselect)
    versions: dict[str, str] = {}


class ConformanceFile(BaseModel):
    """conf/conformance/<gpu_model>.yaml. `claim_count` is written before the claims, so a file
    cut short (a killed writer, a bad copy) no longer matches it and is refused."""

    model_config = ConfigDict(extra="forbid")
    gpu: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,63}$")
    torch: str = ""
    measured: str = ""
    commit: str = ""
    command: str = ""
    kernel_versions: dict[str, str] = {}  # the kernel libraries measured (vllm_flash_attn, flashinfer): kernel_versions.py
    claim_count: int = Field(ge=0)
    claims: dict[Annotated[str, Field(pattern=CLAIM_ID)], ClaimResult]

    @model_validator(mode="after")
    def _builds(self) -> ConformanceFile:
        for cid in self.claims:  # a claim of a build nothing runs would be kept and never read
            check_build(cid.split(":", 1)[0])
        return self

    @model_validator(mode="after")
    def _complete(self) -> ConformanceFile:
        if len(self.claims) != self.claim_count:
            raise ValueError(
                f"claim_count is {self.claim_count} but the file holds {len(self.claims)} claims "
                "(cut short, or edited by hand); allowed: re-run kselect conformance, or fix claim_count"
            )
        return self


PATH_FIELDS = ("backend", "flash_attn_version", "kv_cache_dtype", "head_size", "kernel_block_size", "sliding_window",
               "mm_prefix", "quant_query", "build")  # fmt: skip


def claims_for(fields: dict, model_dtype: str) -> list[str]:
    """The claims a group's kernel path relies on."""
    return list(_claims(model_dtype, _kernel_path(fields)))


def _kernel_path(fields: dict) -> tuple:
    return tuple(fields.get(k) for k in PATH_FIELDS)


@functools.lru_cache(maxsize=4096)
def _claims(model_dtype: str, kernel_path: tuple) -> tuple[str, ...]:
    """The claim ids of a kernel path (the PATH_FIELDS values, in order)."""
    backend, version, kv_dtype, head, kernel_block, window, mm_prefix, quant_query, build = kernel_path
    feats = ["causal", f"page{kernel_block}"] + ["window"] * bool(window) + ["mm_prefix"] * mm_prefix
    feats += ["quant_query"] * quant_query
    dt = claim_dtype(kv_dtype, model_dtype)
    return tuple(Claim(backend, version, dt, head, f, build).id for f in feats)


def load(gpu_model: str, directory: Path | str) -> ConformanceFile | None:
    """The measured file of a GPU model in `directory`, None when there is none; any other problem (empty,
    truncated, a dangling symlink, a bad status) is an error naming the file."""
    path = Path(directory) / f"{gpu_model}.yaml"
    if not path.exists() and not path.is_symlink():
        return None
    return read_file(path)


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


def claim_checks(data: ConformanceFile | None, platform, fields: dict, model_dtype: str,
                 group: str) -> tuple[tuple[ClaimCheck, ...], tuple]:
    """(a check per claim of the group's kernel path against `data`, the platform's conformance file (None:
    nothing measured), the claims warnings of the group)."""
    key = (id(data), platform.gpu_model or platform.name, _claims(model_dtype, _kernel_path(fields)), group)
    hit = _CHECKS.get(key)
    if hit is None or hit[0] is not data:  # a matrix asks for the same few hundred paths thousands of times
        if len(_CHECKS) > 8192:
            _CHECKS.clear()
        hit = _CHECKS[key] = (data, _checks(data, *key[1:]))
    return hit[1]


# a memo of a pure function of its key: the data object itself is kept and compared, so another file never hits
_CHECKS: dict[tuple, tuple] = {}


def _checks(data: ConformanceFile | None, where: str, claims: tuple[str, ...], group: str):
    checks = tuple(check(data, c) for c in claims)
    warnings = []
    for status, code in (("refuted", "claims_refuted"), ("unverified", "claims_unverified")):
        hit = tuple(c for c in checks if c.status == status)
        if hit:
            warnings.append(ClaimsWarning(code=code, group=group, gpu=where, claims=hit))
    return checks, tuple(warnings)


def check(data: ConformanceFile | None, claim: str) -> ClaimCheck:
    res = data.claims.get(claim) if data else None
    if res is None or res.status == "unavailable":  # never run here
        return ClaimCheck(claim=claim, status="unverified")
    status = "verified" if res.status == "verified" else "refuted"
    return ClaimCheck(claim=claim, status=status, measured=res.status, rel_err=res.rel_err, kernel=res.kernel, note=res.detail)
