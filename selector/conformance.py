"""Capability claims and what hardware said about them.

A selected group runs a kernel path that relies on claims such as
`FLASH_ATTN_v4:fp8:d256:window`. `kselect conformance` (kselect/conformance.py) runs each claim on a real GPU and
writes `conf/conformance/<gpu_model>.yaml`; the selector marks every claim of a selection
as verified, refuted or unverified from that file (no file: unverified).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError, format_validation_error
from .records import ClaimCheck, ClaimsWarning
from .vocab import Claim, claim_dtype

CONFORMANCE_DIR = Path(__file__).resolve().parent.parent / "conf" / "conformance"


class ClaimResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # unavailable: never run here (the backend's package is missing); unsupported: the adapter or kernel refused
    status: Literal["verified", "refuted", "unsupported", "unavailable"]
    rel_err: float | None = None
    detail: str = ""
    kernel: str = ""  # which library build ran, where the backend has several (FA3: vLLM's or upstream's)


class ConformanceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str
    torch: str = ""
    measured: str = ""
    commit: str = ""
    command: str = ""
    claims: dict[str, ClaimResult]


def claims_for(fields: dict, model_dtype: str) -> list[str]:
    """The claims a group's kernel path relies on."""
    feats = ["causal", f"page{fields['kernel_block_size']}"]
    if fields["sliding_window"]:
        feats.append("window")
    if fields["mm_prefix"]:
        feats.append("mm_prefix")
    if fields["quant_query"]:
        feats.append("quant_query")
    dt = claim_dtype(fields["kv_cache_dtype"], model_dtype)
    return [Claim(fields["backend"], fields["flash_attn_version"], dt, fields["head_size"], f).id for f in feats]


@functools.lru_cache(maxsize=32)
def load(gpu_model: str) -> ConformanceFile | None:
    path = CONFORMANCE_DIR / f"{gpu_model}.yaml"
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text())
        return ConformanceFile.model_validate(data)
    except yaml.YAMLError as e:
        raise ConfigError(str(path), "unparsable YAML", f"a conformance file ({e.__class__.__name__})") from None
    except ValidationError as e:
        raise ConfigError(str(path), "invalid", format_validation_error(e)) from None


def claim_checks(platform, fields: dict, model_dtype: str, group: str) -> tuple[tuple[ClaimCheck, ...], tuple]:
    """(a check per claim of the group's kernel path, the claims warnings of the group)."""
    data = load(platform.gpu_model) if platform.gpu_model else None
    key = (id(data), platform.gpu_model or platform.name, tuple(claims_for(fields, model_dtype)), group)
    hit = _CHECKS.get(key)
    if hit is None or hit[0] is not data:  # a matrix asks for the same few hundred paths thousands of times
        if len(_CHECKS) > 8192:
            _CHECKS.clear()
        hit = _CHECKS[key] = (data, _checks(data, *key[1:]))
    return hit[1]


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
