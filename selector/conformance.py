"""Capability claims and what hardware said about them.

A selected group runs a kernel path that relies on claims such as
`FLASH_ATTN_v4:fp8:d256:window`. `kernels.conformance` runs each claim on a real GPU and
writes `conf/conformance/<gpu_model>.yaml`; the selector marks every claim of a selection
as verified, refuted or unverified from that file (no file: unverified).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError, format_validation_error
from .selection import ClaimCheck

CONFORMANCE_DIR = Path(__file__).resolve().parent.parent / "conf" / "conformance"
_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}


class ClaimResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: str  # verified | refuted | unsupported
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
