"""The harness's options (typed: `kselect bench` steps validate an experiment's options into them; the command line of
`python -m kselect.measurement.e2e` is kselect/commands/e2e.py), the selections it can run, and the operating points an
objective selection is resolved at."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from kselect.gemma4.graphs import DEFAULT_MAX_TOKENS, check_max_tokens
from kselect.measurement.e2e_report import OBJECTIVES

# base, pr48666, pr53175: the seed's story (rules=post_pr52987 and its overlays); vllm_0_33_0: the default rules
SEED = "rules=post_pr52987"
VLLM_KERNELS_ONLY = ["platform.packages.kselect_triton=false", "platform.packages.fa3_upstream=false"]
SELECTIONS = {"base": [SEED], "pr48666": [SEED, "overlay=[pr48666]"], "pr53175": [SEED, "overlay=[pr53175]"],
              "vllm_0_33_0": ["rules=vllm_0_33_0"],
              # same-run baselines: one backend for every group
              "pin_triton": [SEED, "attention.backend=TRITON_ATTN"],
              "pin_flashinfer": [SEED, "attention.backend=FLASHINFER"], "pin_fa": [SEED, "attention.backend=FLASH_ATTN"],
              "pin_fa3": [SEED, "attention.backend=FLASH_ATTN", "attention.flash_attn_version=3"],
              "pin_fa4": [SEED, "attention.backend=FLASH_ATTN", "attention.flash_attn_version=4"],
              # objective=vllm under --rules (the same rules as the objectives'): vLLM's own choice
              "vllm": [SEED],
              # selection by measurement (conf/perf/<gpu>.yaml): per group and phase, the fastest verified kernel
              "latency": [SEED, "objective=latency"], "throughput": [SEED, "objective=throughput"],
              # the objectives over the kernels vLLM ships only (no TRITON_ATTN+kselect, no FLASH_ATTN v3+upstream)
              "latency_vllm": [SEED, "objective=latency", *VLLM_KERNELS_ONLY],
              "throughput_vllm": [SEED, "objective=throughput", *VLLM_KERNELS_ONLY],
              # vLLM's own selection measured a second time, never folded into `vllm` (same_as): its spread from
              # `vllm` is this run's noise band (kselect/measurement/e2e_report.py)
              "vllm_twin": [SEED]}
DEFAULT_SELECTIONS = ["base", "pr48666", "pr53175"]
KV_DTYPES = ["auto", "fp8"]
PROFILE_STEPS = 8  # B1 decode steps profiled per selection
PROFILE_PREFILLS = 3  # B1 prefills of --prompt-len profiled per selection


def selection_overrides(name: str, rules: str) -> list[str]:
    """A selection's Hydra overrides with the seed's rules replaced by `rules` (a selection naming its own rules,
    like vllm_0_33_0, keeps them)."""
    return [f"rules={rules}" if o == SEED else o for o in SELECTIONS[name]]


class Options(BaseModel):
    """The harness's options, typed: an experiment's `steps.<name>.options` (kselect bench) or the command line."""

    model_config = ConfigDict(extra="forbid")
    out: Path
    budget_s: float = 540
    presets: list[str] = ["gemma4_e4b", "gemma4_31b"]
    selections: list[Literal[tuple(SELECTIONS)]] = DEFAULT_SELECTIONS  # type: ignore[valid-type]
    kv: list[str] = KV_DTYPES
    batches: list[int] = [1, 16]
    e4b_batch_64: bool = True  # also batch 64 for gemma4_e4b, last, if time permits
    prompt_len: int = 512
    new: int = 128
    hf_new: int = 32  # HF decode tokens (HF decode is slow; per-step time is flat)
    reps: int = 3
    check_batch: int = 2
    check_steps: int = 4
    capacity_gib: float = 40.0
    platform: str = "auto"
    seed: int = 0
    no_hf: bool = False
    no_cuda_graphs: bool = False
    rules: str = SEED.removeprefix("rules=")  # rules for every selection
    no_numerics: bool = False  # skip the per-call numerics check (conformance has it)
    prefill_lens: list[int] = []  # also time B1 prefill of one prompt of each of these lengths, per selection
    chunk_sweep: list[int] = []  # prefill chunk sizes (Engine max_step_tokens) timed for each prefill_lens prompt
    chunk_selections: list[str] = ["vllm", "latency"]
    skip: list[str] = []  # selection:kv pairs not to run (e.g. pin_triton:auto)
    profile_selections: list[str] = []  # profile B1 eager decode steps (attention ms per step) for these selections
    objective_at_run: bool = True  # resolve objective selections at each run's own shapes
    prefill_rounds: int = 0  # time each prefill metric again in this many interleaved rounds (prefill_rounds.py)
    prefill_graph_tokens: int = DEFAULT_MAX_TOKENS  # the longest prefill step that replays a CUDA graph
    smoke: bool = False  # CPU smoke run: gemma4_tiny, tiny sizes

    @field_validator("prefill_graph_tokens")
    @classmethod
    def _bucket(cls, v: int) -> int:
        check_max_tokens(v)
        return v


def smoke_sized(opts: Options) -> Options:
    """A copy of the options; `smoke`: gemma4_tiny at tiny sizes, on the CPU where the platform is auto."""
    opts = opts.model_copy(deep=True)
    if opts.smoke:
        opts.presets, opts.batches, opts.e4b_batch_64 = ["gemma4_tiny"], [1, 2], False
        opts.prompt_len, opts.new, opts.hf_new, opts.reps, opts.check_steps = 24, 6, 4, 1, 3
        if opts.platform == "auto":
            opts.platform = "cpu"
    return opts


def run_points(opts, sname: str, batches: list[int]) -> list[str]:
    """The points a selection is resolved for: "" (once, runs everywhere), or with --objective-at-run an
    objective's own operating point per run: "decode B<b>" (that batch's runs, and the B1 run's prefill of
    --prompt-len tokens) and "prefill <n>" (the --prefill-lens prompt of n tokens)."""
    if sname not in OBJECTIVES or not opts.objective_at_run:
        return [""]
    return [f"decode B{b}" for b in batches] + [f"prefill {n}" for n in opts.prefill_lens]


def point_overrides(opts, point: str) -> list[str]:
    """Hydra overrides that put the objective's operating point (conf/objective) at a run's shapes and
    request: decode B x the mean context of its decode steps after a B1 prefill of its prompt, --new
    decode steps a request; a prefill run's request is its prompt alone (0 decode steps)."""
    if not point:
        return []
    kind, _, n = point.partition(" ")
    if kind == "decode":
        b, ctx, prompt, steps = int(n.removeprefix("B")), opts.prompt_len + opts.new // 2, opts.prompt_len, opts.new
    else:
        b, ctx, prompt, steps = 1, int(n), int(n), 0
    return [f"objective.decode.batch={b}", f"objective.decode.context={ctx}", f"objective.prefill.context={prompt}",
            f"objective.new_tokens={steps}"]
