"""Typed findings of a resolution: why a backend was rejected, what a reviewer must be warned
about, what hardware said about a claim, why no selection exists. Each has a stable `code`, the
rule id where a rule decided, and its structured fields; `text` is rendered from them by
`texts.py` (and carried in JSON output). Tools read the fields, never the text.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..base import texts


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def text(self) -> str:
        return texts.render(self)


# ---------------------------------------------------------------- claims

Verification = Literal["verified", "refuted", "unverified"]


class ClaimCheck(Record):
    """One capability claim a selected kernel path relies on, and what hardware said."""

    code: Literal["claim"] = "claim"
    claim: str  # a claim id (vocab.Claim), e.g. "FLASH_ATTN_v4:fp8:d256:window"
    status: Verification
    measured: str | None = None  # the conformance file's status (verified | refuted | unsupported), None: never run
    rel_err: float | None = None
    kernel: str = ""  # which library build ran
    note: str = ""  # the conformance file's detail


# ---------------------------------------------------------------- rejections

RejectCode = Literal[
    "device", "package", "head_size", "dtype", "kv_cache_dtype", "block_size",
    "mm_prefix", "compute_capability", "sliding_window", "mla", "non_mla", "sinks", "sparse", "non_sparse", "rule",
]  # fmt: skip


class Rejection(Record):
    """Why one candidate backend is not valid for a group: a capability it does not declare
    (`capability` names the field), or a `reject` rule (`rule`, with the rule's reason)."""

    code: RejectCode
    backend: str
    rule: str | None = None
    capability: str | None = None  # the capabilities.<backend> field that refused
    value: Any = None  # the refused fact (device, package, head size, ...)
    reason: str | None = None  # the reject rule's declared reason
    kernel_blocks: tuple[Any, ...] | None = None  # block_size: the backend's kernel block sizes

    @property
    def source(self) -> str:
        """Where the decision is declared: the rule id, or `cap.<backend>.<field>`."""
        return self.rule or f"cap.{self.backend}.{self.capability}"


@functools.lru_cache(maxsize=4096)
def rejection(code: str, backend: str, **detail: Any) -> Rejection:
    """A shared Rejection (records are immutable; a matrix repeats the same few thousands of times); `detail`
    is its other fields (rule or capability, value, reason, kernel_blocks)."""
    return Rejection(code=code, backend=backend, **detail)


# ---------------------------------------------------------------- warnings


class RuleWarning(Record):
    """A `warning` rule matched."""

    code: Literal["rule"] = "rule"
    group: str
    rule: str
    reason: str


class OrphanRule(Record):
    """An overlay disabled a rule that no config defines."""

    code: Literal["orphan_rule"] = "orphan_rule"
    group: str
    rule: str


class BlockSizePrecluded(Record):
    """kv_cache.block_size alone rejected higher-priority backends."""

    code: Literal["block_size_precluded"] = "block_size_precluded"
    group: str
    rule: None = None
    block_size: int
    backends: tuple[str, ...]


class ClaimsWarning(Record):
    """Claims of the selected kernels that hardware refuted, or that were never verified there."""

    code: Literal["claims_refuted", "claims_unverified"]
    group: str
    rule: None = None
    gpu: str  # the conformance data's GPU model, or the platform name without data
    claims: tuple[ClaimCheck, ...]


class ObjectiveWarning(Record):
    """An objective (selector/measure/objective.py) could not use measured data: a candidate no measurement
    covers (left out, never guessed), no measured choice at all (vLLM's kept), nothing to choose, or
    candidates of one group and phase compared on figures timed differently (fenced vs back to back), or a
    figure ranked that was measured on another kernel library version than the release's."""

    code: Literal["objective_no_measurement", "objective_kept_vllm", "objective_all_pinned", "objective_mixed_timing",
                  "objective_other_version"]
    group: str
    rule: None = None
    objective: str
    backend: str | None = None
    phase: str | None = None
    shape: str | None = None  # e.g. "B1 x 8192 (d256, bf16, 16 KV heads)"
    gpu: str | None = None
    timings: str | None = None  # objective_mixed_timing: each timing and one bucket timed so
    versions: str | None = None  # objective_other_version: the library versions that differ, and a bucket timed so
    release: str | None = None  # objective_other_version: the vLLM release the rules model


class SettingIgnored(Record):
    """A setting vLLM accepts and then ignores (e.g. a FlashAttention version where no layer runs
    FlashAttention): kselect selects what vLLM selects and says so; `strict=true` refuses it."""

    code: Literal["setting_ignored"] = "setting_ignored"
    group: str
    rule: None = None
    setting: str  # the key=value as given, e.g. attention.flash_attn_version=3
    reason: str  # why vLLM ignores it


class KernelDataVersion(Record):
    """Conformance or perf data measured with other kernel library versions than the release's."""

    code: Literal["kernel_data_version"] = "kernel_data_version"
    group: str
    rule: None = None
    data: str  # the data file, e.g. conf/conformance/nvidia_h200.yaml
    library: str  # e.g. flashinfer
    measured: str  # the version the data was measured with
    release: str  # the version the rules option's release ships
    rules: str


Warning = Annotated[RuleWarning | OrphanRule | BlockSizePrecluded | ClaimsWarning | ObjectiveWarning | SettingIgnored
                    | KernelDataVersion, Field(discriminator="code")]
STRICT_CODES = ("setting_ignored", "kernel_data_version")  # strict=true refuses these (exit 2)
WARNING_RANK = {"claims_refuted": 0, "rule": 1, "orphan_rule": 1, "block_size_precluded": 1, "claims_unverified": 2,
                "objective_no_measurement": 2, "objective_kept_vllm": 1, "objective_all_pinned": 2,
                "objective_mixed_timing": 1, "objective_other_version": 1, "setting_ignored": 1,
                "kernel_data_version": 1}


# ---------------------------------------------------------------- no selection

FailureCode = Literal["no_priority_rule", "pin_invalid", "no_valid_backend", "draft_backend_invalid",
                      "page_unify", "no_common_block", "init_failure",
                      "no_common_cache_block", "strict", "architecture_not_modelled",
                      "checkpoint_kv_refused"]  # fmt: skip


class Failure(Record):
    """Why a config has no selection (SelectionError): its rejected backends travel beside it."""

    code: FailureCode
    group: str | None = None
    head: int | None = None
    version: int | None = None
    backend: str | None = None
    pin_source: str | None = None
    platform: str | None = None
    device: str | None = None
    model: str | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    page: int | None = None
    largest_page: int | None = None
    kv_block: int | None = None
    kernel_blocks: tuple[Any, ...] | None = None
    warnings: tuple[str, ...] | None = None  # strict: the warnings refused
    architecture: str | None = None  # architecture_not_modelled: the model's, and what the rules model
    rules: str | None = None
    allowed: str | None = None
    reason: str | None = None  # checkpoint_kv_refused: why vLLM refuses the KV dtype for this checkpoint
    reasons: tuple[str, ...] | None = None  # the rejections behind a phrase that ends in ':' ("NAME: why; why")


# ---------------------------------------------------------------- conformance runs


class ClaimRun(Record):
    """How to run a claim on hardware: the descale mode and page size of the kernel path that
    relies on it, as a selection resolves that path (`source`: the config), or as the backend's
    capability declares it when no rule set makes the path valid (`source`: capabilities.<backend>)."""

    code: Literal["claim_run"] = "claim_run"
    claim: str
    descale: Literal["none", "q_k_v", "k_v", "kv_dequant"]
    page: int
    per_head_scales: bool  # FP8 descales per (sequence, kv head) where the backend declares them
    source: str
