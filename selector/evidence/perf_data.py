"""Measured kernel performance per GPU: `conf/perf/<gpu_model>.yaml`, beside conf/conformance/.

`kselect perf` (kselect/measurement/perf.py) times the kernel behind every verified conformance claim over
shape buckets and writes one entry per bucket; the `objective` key (selector/measure/objective.py)
reads them. No torch here: the selector only reads and merges the data.

Bucket id: `<path>:<kv>:d<head>:<w<window>|full>:<phase>:b<batch>:c<context>:h<hq>x<hkv>:p<page>`,
e.g. `FLASHINFER:fp8:d256:w1024:decode:b64:c8192:h32x16:p16`; path and kv as in conformance claim
ids. decode = one new token per sequence over `context` cached tokens; prefill = a fresh prompt of
`context` tokens per sequence; page = the kernel block size the call reads. A kernel's speed depends
on its page (FlashInfer decoded 6% slower end to end over 64-token pages than over 16,
bench/results/h200/objective_at_run/), so a figure is only read at the page it was measured at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..base.errors import ConfigError, format_validation_error
from ..config.compose import CONF_DIR
from ..base.cache import load_yaml_cached
from ..base.files import atomic_write
from ..config.vocab import PATH_RE, check_build

PERF_DIR = CONF_DIR / "perf"  # the bundled files (kselect perf writes here by default)
Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")
COVER = 4.0  # a bucket covers a shape when its batch and context are each within this factor


class PerfEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kernel: str = Field(pattern=rf"^{PATH_RE}$")  # path id: FLASHINFER, FLASH_ATTN_v4, FLASH_ATTN_v3+upstream
    build: str  # the library build that ran (e.g. "flash-attn-4", "vllm.vllm_flash_attn (FA4 fork)")
    versions: dict[str, str] = {}  # torch, triton, cuda, the kernel package
    kv: str  # bf16 | fp16 | fp32 | fp8 | fp8_e5m2 (claim dtype)
    head: int = Field(gt=0)
    window: int | None = Field(default=None, gt=0)
    phase: Phase
    batch: int = Field(gt=0)
    context: int = Field(gt=0)
    num_q_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    page: int = Field(gt=0)
    ms: float = Field(gt=0)  # per call (one layer), median
    # host wall time of one eager call (launch and host work; the GPU idle before it), median; measured
    # for prefill, which runs eagerly; None where not measured
    host_ms: float | None = Field(default=None, gt=0)
    # prefill graphs: host time of the backend's planning before each replay (FlashInfer's plan), once per
    # group and step, the GPU idle meanwhile; None where not measured
    plan_ms: float | None = Field(default=None, ge=0)
    graph: bool  # timed as a CUDA-graph replay
    # decode: the figure is the mean over contexts spread +- this fraction around `context` (kselect perf
    # --context-spread); 0: the one context
    context_spread: float = Field(default=0.0, ge=0, lt=1)
    # KIND:MIB: each call timed after a fence call, minus the fences' time (kselect perf --fence: gemv reads
    # MIB of weights as a layer's projections do, layer adds the small kernel before attention, write zeroes
    # MIB); "": back to back, where a call may overlap the next and find its K/V in L2
    fence: str = Field(default="", pattern=r"^((write|gemv|layer):[1-9][0-9]*)?$")
    gpu: str
    date: str

    @field_validator("kernel")
    @classmethod
    def _known_build(cls, v: str) -> str:
        check_build(v)  # a bucket of a build nothing runs would never be read
        return v

    @property
    def shape(self) -> KernelShape:
        return KernelShape(self.kernel, self.kv, self.head, self.window, self.num_kv_heads, self.page)

    @property
    def bucket(self) -> str:
        return bucket_id(self.shape, self.num_q_heads, self.phase, self.batch, self.context)


HOST_BOUND = 1.25  # a step whose wall time exceeds its kernels' device time by this factor waits on the host


class StepEntry(BaseModel):
    """One eager model step (`kselect perf-steps`): is it bound by the host or by the GPU? In a host-bound
    step an attention call costs its host time; in a GPU-bound one the host runs ahead and only the
    kernels count. Measured with vLLM's own selection for the model (its `backends`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str  # conf/model name
    phase: Phase
    batch: int = Field(gt=0)
    context: int = Field(gt=0)  # prompt tokens (prefill)
    backends: str  # the selection that ran, per group
    wall_ms: float = Field(gt=0)  # host wall time of the step, median
    graphs: bool = False  # the timed steps replayed the engine's prefill CUDA graph (false: eager)
    kernel_ms: float = Field(gt=0)  # device time of its kernels
    attention_ms: float = Field(ge=0)  # of which the attention backends' calls
    versions: dict[str, str] = {}
    gpu: str
    date: str

    @property
    def key(self) -> str:
        return step_id(self.model, self.phase, self.batch, self.context)

    @property
    def host_bound(self) -> bool:
        return self.wall_ms > HOST_BOUND * self.kernel_ms


class PerfFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str
    torch: str = ""
    measured: str = ""
    commit: str = ""
    command: str = ""
    kernel_versions: dict[str, str] = {}  # the kernel libraries measured (vllm_flash_attn, flashinfer): kernel_versions.py
    entries: dict[str, PerfEntry] = {}
    steps: dict[str, StepEntry] = {}


def step_id(model: str, phase: str, batch: int, context: int) -> str:
    return f"{model}:{phase}:b{batch}:c{context}"


@dataclass(frozen=True)
class KernelShape:
    """A kernel path on one layer shape at one page: what a bucket times, apart from its query heads and
    operating point (phase, batch, context)."""

    kernel: str  # path id (selector/measure/builds.py)
    kv: str  # claim dtype
    head: int
    window: int | None
    num_kv_heads: int
    page: int


def bucket_id(shape: KernelShape, num_q_heads: int, phase: str, batch: int, context: int) -> str:
    w = f"w{shape.window}" if shape.window else "full"
    return (f"{shape.kernel}:{shape.kv}:d{shape.head}:{w}:{phase}:b{batch}:c{context}"
            f":h{num_q_heads}x{shape.num_kv_heads}:p{shape.page}")


# ---------------------------------------------------------------- reading a file


def load(gpu_model: str, directory: Path | str) -> PerfFile | None:
    """The perf file of a GPU model in `directory` (resolution reads it through its Evidence, evidence.py),
    None when there is none; a bad file is an error naming it."""
    path = Path(directory) / f"{gpu_model}.yaml"
    if not path.exists():
        return None
    try:
        data = PerfFile.model_validate(load_yaml_cached(path, "a perf file (kselect perf)"))  # parsed once per content
    except ValidationError as e:
        raise ConfigError(str(path), "invalid", format_validation_error(e)) from None
    for key, entry in data.entries.items():
        if key != entry.bucket:
            raise ConfigError(f"{path}: entries.{key}", key, f"the entry's own bucket id {entry.bucket!r}", "key")
    for key, st in data.steps.items():
        if key != st.key:
            raise ConfigError(f"{path}: steps.{key}", key, f"the step's own id {st.key!r}", "key")
    return data


def merge_write(path: Path | str, header: dict, entries: dict[str, PerfEntry],
                steps: dict[str, StepEntry] | None = None) -> PerfFile:
    """Merge `entries` and `steps` into the file at `path` (new ones win) and write it atomically."""
    path = Path(path)
    old = load(path.stem, path.parent) if path.exists() else None
    merged = dict(old.entries) if old else {}
    merged.update(entries)
    all_steps = {**(old.steps if old else {}), **(steps or {})}
    doc = PerfFile(**header, entries=dict(sorted(merged.items())), steps=dict(sorted(all_steps.items())))
    atomic_write(path, yaml.safe_dump(doc.model_dump(mode="json"), sort_keys=False))
    return doc


# ---------------------------------------------------------------- lookup


def nearest(data: PerfFile | None, shape: KernelShape, phase: str, batch: int, context: int) -> PerfEntry | None:
    """The measured bucket nearest the point (log distance over batch and context) among entries of the
    same kernel shape (path, KV dtype, head size, KV heads, window, page) and phase; None when there is none or
    the nearest lies more than COVER away in batch or context (no guess: another head count, window or
    page is other work, not a nearby point).

    A bucket timed over a spread of contexts (context_spread) measured every context in its range, so a
    point inside it is at distance 0 there. Equally near, a fenced bucket (timed as inside a model step)
    wins over one timed back to back, whose K/V may sit in L2: at E4B's 516-token decode point the
    back-to-back 1x512 buckets put FA3 and FlashInfer first, the fenced 544 +- 6.25% ones TRITON_ATTN; against
    vLLM's choice in the same run the first decoded 1.05x as fast, the second 1.19x (bench/results/h200/graphs4096/)."""
    if data is None:
        return None
    table, answered = _index(data)
    asked = (phase, shape, batch, context)
    if asked in answered:  # an objective's search asks the same point of the same shape many times
        return answered[asked]
    best, best_key = None, None
    for e in table.get((phase, shape), ()):
        inside = e.context * (1 - e.context_spread) <= context <= e.context * (1 + e.context_spread)
        ratios = [abs(math.log(e.batch / batch)), 0.0 if inside else abs(math.log(e.context / context))]
        if max(ratios) > math.log(COVER):
            continue
        key = (sum(ratios), e.fence == "", e.bucket)
        if best_key is None or key < best_key:
            best, best_key = e, key
    answered[asked] = best
    return best


def _index(data: PerfFile) -> tuple[dict[tuple, list[PerfEntry]], dict[tuple, PerfEntry | None]]:
    """data's entries by what nearest() matches exactly (a matrix asks thousands of times of ~1,600 entries),
    and nearest()'s answers so far."""
    hit = _INDEX.get(id(data))
    if hit is None or hit[0] is not data or hit[2] != len(data.entries):  # a file changed in place re-indexes
        if len(_INDEX) > 16:
            _INDEX.clear()
        table: dict[tuple, list[PerfEntry]] = {}
        for e in data.entries.values():
            table.setdefault((e.phase, e.shape), []).append(e)
        hit = _INDEX[id(data)] = (data, table, len(data.entries), {})
    return hit[1], hit[3]


_INDEX: dict[int, tuple] = {}  # id -> (the file itself, kept and compared, its index, size, answers)


def nearest_step(data: PerfFile | None, model: str, phase: str, batch: int, context: int) -> StepEntry | None:
    """The measured step of this model and phase nearest the point (log distance, within COVER), or None."""
    if data is None:
        return None
    best, best_d = None, math.inf
    for st in data.steps.values():
        if (st.model, st.phase) != (model, phase):
            continue
        ratios = [abs(math.log(st.batch / batch)), abs(math.log(st.context / context))]
        if max(ratios) > math.log(COVER):
            continue
        if sum(ratios) < best_d:
            best, best_d = st, sum(ratios)
    return best
