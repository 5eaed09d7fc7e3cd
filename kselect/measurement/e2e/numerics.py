"""The numerics check of a selection: its attention calls against TORCH_REFERENCE, each at its kernel's bar."""

from __future__ import annotations

import math

import torch

from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error, reference_groups
from kselect.measurement.e2e_report import WRONG
from kselect.measurement.step_profile import free


def numerics_check(model, groups, prompts, steps: int, graphs) -> dict:
    """The verdict: every attention call of the selected kernels vs TORCH_REFERENCE on the same inputs,
    each kernel at its own bar (gemma4/attention_check.py). Also recorded: end-to-end logits vs an
    all-reference run on the same cache layout and dtype (teacher-forced), drift that compounds over
    the layers (information; the per-kernel bar does not apply to it)."""
    from kselect.gemma4.attention_check import check_attention
    from kselect.kernels.tolerances import tolerance

    max_len = max(map(len, prompts)) + steps + 1
    eng = Engine(model, groups, EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, cuda_graphs=graphs))
    res = eng.generate(prompts, steps + 1, return_logits=True, stop_at_eos=False)
    forced = [list(col) for col in zip(*res.steps)]
    ref = Engine(model, reference_groups(eng.groups), EngineConfig(max_seqs=len(prompts), max_seq_len=max_len,
                                                                   kv_scales=eng.cache.scales(), cuda_graphs=False))
    r = ref.generate(prompts, len(res.steps), forced=forced, return_logits=True, stop_at_eos=False)
    got, want = torch.stack(res.logits), torch.stack(r.logits)  # [steps, B, V]
    fp8 = eng.cache.fp8
    tol = tolerance(model.dtype, fp8=fp8)
    err = max_rel_error(got, want)
    out = dict(max_rel_err=err, prefill_rel_err=max_rel_error(got[:1], want[:1]),
               decode_rel_err=max_rel_error(got[1:], want[1:]) if len(got) > 1 else None,
               logits_tolerance_info=tol, steps=len(res.steps),
               prompt_lens=[len(p) for p in prompts], cuda_graphs=res.cuda_graphs,
               argmax_agree=float((got.argmax(-1) == want.argmax(-1)).float().mean()), notes=res.notes)
    checks = check_attention(model, eng.groups, prompts, forced, max_len=max_len, kv_scales=eng.cache.scales())
    out["attention_calls"] = [dict(group=c.group, backend=c.backend, calls=c.calls, max_rel_err=c.worst,
                                   tolerance=c.tolerance, checked=c.checked, ok=c.ok) for c in checks]
    out["tolerance"] = max((c.tolerance for c in checks if c.checked), default=tol)
    out["verdict"] = "ok" if all(c.ok for c in checks) else WRONG
    out["attention_max_rel_err"] = max((c.worst for c in checks if c.checked), default=None,
                                       key=lambda e: math.inf if math.isnan(e) else e)
    if fp8:  # how far the FP8 cache itself is from a model-dtype cache (the quantization error)
        mdt = str(model.dtype).removeprefix("torch.")
        plain = {k: g.model_copy(update=dict(kv_cache_dtype=mdt, descale="none", kv_scales="none"))
                 for k, g in reference_groups(eng.groups).items()}
        r2 = Engine(model, plain, EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, cuda_graphs=False)).generate(
            prompts, len(res.steps), forced=forced, return_logits=True, stop_at_eos=False)
        out["fp8_quant_rel_err"] = max_rel_error(want, torch.stack(r2.logits))
    del eng, ref
    free()
    return out
