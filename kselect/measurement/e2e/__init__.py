"""Gemma-4 end to end: our engine on the selected kernels vs Hugging Face transformers, same weights.

    python -m kselect.measurement.e2e --out $OUT/e2e --budget-s 540 [--presets gemma4_e4b gemma4_31b]
    python -m kselect.measurement.e2e --smoke --out /tmp/e2e          # CPU, gemma4_tiny, seconds
    kselect bench experiment=<name>                                   # a recorded run (bench/conf/experiment/)

Per preset (seeded random weights in the model dtype, built on the device; freed between presets):
  * every selection (base, overlay=[pr48666], overlay=[pr53175]; `--selections ... pin_triton` adds
    attention.backend=TRITON_ATTN, a same-run baseline) x KV dtype (auto = model dtype, fp8):
    the backend per group, the KV-cache capacity in a fixed budget (--capacity-gib; non-shared layers
    x 2 x kv_heads x head_size x bytes, whole kv blocks), and the numerics check: max rel logit error
    of the selected kernels vs TORCH_REFERENCE on the same cache layout/dtype (prefill past the
    sliding window, then a few teacher-forced decode steps). A WRONG verdict is reported, not hidden:
    the run still measures everything, then exits with status 1 naming each WRONG selection.
    Selections that resolve to the same groups are measured once (`same_as`). A selected backend whose
    kernel is not installed is reported as that selection's error, never substituted.
  * prefill tokens/s (--prompt-len, random tokens) and decode tokens/s (--new tokens, greedy, CUDA
    graphs) at each batch size, after a warm-up: CUDA events, median of --reps runs;
  * the same weights in HF transformers (attn_implementation="sdpa"), built on the meta device and
    loaded with `assign=True` (tensors shared with our model, not copied); last-token logits are
    checked against our model before timing; prefill = model(ids, logits_to_keep=1), decode =
    (generate(--hf-new tokens) - prefill) / (hf_new - 1) steps.
Results go to --out/e2e.json and e2e.md after every measurement (a timeout still leaves them).

One role a module: `options` (the typed options, the selections, the objectives' points), `harness` (the run loop),
`selections` (groups, identity, capacity), `numerics`, `timing` (our engine), `hf` (the HF baseline), `extras` (long
prefills, profiles, interleaved rounds), `environment`; the record and its Markdown are kselect/measurement/e2e_report.py.
The command line is kselect/commands/e2e.py.
"""

from __future__ import annotations

# what the recorded measurements (bench/, `kselect bench` steps) name from here
from kselect.measurement.e2e.environment import ceilings, environment
from kselect.measurement.e2e.extras import extras, rounds
from kselect.measurement.e2e.harness import run
from kselect.measurement.e2e.hf import hf_logits_check, hf_model, time_hf, time_hf_prefill
from kselect.measurement.e2e.numerics import numerics_check
from kselect.measurement.e2e.options import (SELECTIONS, Options, point_overrides, run_points, selection_overrides,
                                             smoke_sized)
from kselect.measurement.e2e.selections import capacity, describe, signature
from kselect.measurement.e2e.timing import first_line, measure, profile_attention, time_engine, time_prefill
from kselect.measurement.e2e_report import WRONG
from kselect.measurement.step_profile import free

__all__ = ["SELECTIONS", "WRONG", "Options", "capacity", "ceilings", "describe", "environment", "extras", "first_line",
           "free", "hf_logits_check", "hf_model", "measure", "numerics_check", "point_overrides", "profile_attention",
           "rounds", "run", "run_points", "selection_overrides", "signature", "smoke_sized", "time_engine", "time_hf",
           "time_hf_prefill", "time_prefill"]
