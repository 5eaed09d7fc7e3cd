"""The selector's output: one `GroupSelection` per KV-cache layer group.

Plain pydantic data, so `backends/` and `gemma4/` consume it without knowing the rules.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..outputs.measured import PhaseEvidence
from ..outputs.records import ClaimCheck, Rejection, Warning
from ..config.vocab import GroupKind, group_id, kernel_label

# How FP8 descales reach the kernel:
#   none        no quantized KV
#   q_k_v       q is quantized to FP8 too (quant-query), q/k/v descales passed (FA3, Triton)
#   k_v         K/V descales only, q stays in the model dtype (the reference, Triton)
#   kv_dequant  K/V dequantized inside the kernel, q unquantized (vLLM FA4 fork on SM90)
Descale = Literal["none", "q_k_v", "k_v", "kv_dequant"]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupSelection(Frozen):
    kind: GroupKind
    draft: bool = False  # an MTP drafter group (Q-only layers reading the target cache)
    layers: tuple[int, ...]
    reads_from: tuple[int, ...] = ()  # target layers whose cache the draft/shared layers read
    head_size: int
    num_kv_heads: int
    sliding_window: int | None
    # the other per-group facts the rules read (selector/rules/candidates.py group_facts), shown in every output
    sinks: bool = False  # attention sinks (gpt-oss)
    sparse: bool = False  # sparse MLA: an indexer picks the keys (DeepSeek-V3.2)
    mamba_type: str | None = None  # a fixed-backend group's layer type (mamba1 / mamba2 / gdn / linear / short_conv)
    backend: str
    flash_attn_version: int | None
    # a kernel build other than the one vLLM ships (vocab.ALT_BUILDS, e.g. FA3 "upstream"); only an objective sets it
    build: str | None = None
    kernel_block_size: int
    # vLLM splits a kind's layers into several KV-cache groups; MTP draft layers on another backend
    # join one, whose target layers then run this kernel block (null: none differ)
    draft_shared_kernel_block: int | None = None
    kv_block_size: int
    kv_cache_dtype: str  # resolved: bfloat16 / float16 / float32 / fp8_e4m3 / fp8_e5m2
    quant_query: bool
    descale: Descale
    kv_scales: Literal["none", "unit", "calibrated", "copied_from_target"]
    mm_prefix: bool
    rejected: dict[str, tuple[Rejection, ...]] = {}
    trace: tuple[str, ...] = ()  # rule ids that fired, in order
    reasons: tuple[str, ...] = ()  # human text: why this backend/version/block
    warnings: tuple[Warning, ...] = ()
    claims: tuple[ClaimCheck, ...] = ()
    # objective != vllm: the measured figures behind the choice, per phase, and the group's prefill
    # path when it differs from this (decode) one over the same paged cache (selector/measure/objective.py)
    measured: tuple[PhaseEvidence, ...] = ()
    prefill: GroupSelection | None = None

    @property
    def label(self) -> str:
        """How outputs name its kernel path: `FLASH_ATTN v3`, `FLASH_ATTN v3+upstream`, `FLASHINFER`."""
        return kernel_label(self.backend, self.flash_attn_version, self.build)

    @property
    def id(self) -> str:
        """`sliding_window`, `draft:full_attention`, ... (vocab.group_id)."""
        return group_id(self.kind, self.draft)


class Selection(Frozen):
    environment: dict  # a short summary of what was resolved (platform, model, kv, spec, pins, overlays)
    block_size: int  # the cache manager block size (vLLM cache_config.block_size)
    groups: tuple[GroupSelection, ...]
    warnings: tuple[Warning, ...] = ()
    trace: tuple[str, ...] = ()  # model-level rule ids (forcing, preferred block, spec)
    # An objective's choice that runs a kernel build vLLM does not ship (vocab.ALT_BUILDS): the best choice made of
    # vLLM's own kernels (what `output=vllm` exports; None: no such choice is verified and measured), and each one's
    # request time as the objective scores it (ms of attention). Not serialized: the export and its notes read them.
    vllm_kernels: Selection | None = Field(default=None, exclude=True)
    request_ms: float | None = Field(default=None, exclude=True)

    def all_warnings(self) -> list[Warning]:
        """Every warning, the groups' in order, then the selection-level ones (each names its group)."""
        return [w for g in self.groups for w in g.warnings] + list(self.warnings)

    def group(self, kind: GroupKind, draft: bool = False) -> GroupSelection:
        for g in self.groups:
            if g.kind == kind and g.draft == draft:
                return g
        raise KeyError(f"no {'draft ' if draft else ''}{kind} group in this selection")
