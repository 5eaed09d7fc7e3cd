"""Gemma-4 MTP speculative decoding: tokens/s and acceptance, plain vs speculative, and copied vs
unit draft KV scales on a calibrated FP8 cache.

    python -m kselect.measurement.gemma4.mtp [hydra overrides] --out DIR [--batch 4] [--prompt-len 32] [--new 48]
        [--k 4] [--drafter HF_ASSISTANT_FOLDER] [--inits random,copy] [--repeats 3] [--temperature 0]

Same selection and target as `kselect run` (bundled gemma4_tiny by default, or model.checkpoint;
`spec_decode=mtp` is added when absent). Drafters: `--drafter` (an HF Gemma4AssistantForCausalLM
folder), else seeded tiny drafters with the preset's `drafter:` shapes (`random` weights and the
`copy` heuristic init). Runs on CUDA or CPU (the platform's device).

1. the requested cell: plain decoding vs speculative decoding with each drafter;
2. the calibrated FP8 cell (kv_cache=fp8, kv_cache.scales=calibrated) twice: draft layers with the
   target's K/V scales (spec_decode.copy_target_kv_scales=true, the #48666 fix) and with their own
   unit scales (=false, the bug): acceptance, tokens/s, and the draft logits' error against the same
   K/V in a model-dtype cache (one draft step from the prefill state: the bug without the noise of
   acceptance statistics).

Greedy runs also check that speculative output == plain output. Random prompts of --prompt-len
tokens; one warm-up, then the median of --repeats timed runs. Both modes run as CUDA graphs where
the engine can (speculative greedy: captured draft steps and verify pass, gemma4/graphs.py).

Speed-up as a function of acceptance: a round costs the same whatever is accepted (fixed shapes),
so from the measured plain step time t and round time r the speed-up at a per-draft acceptance
probability a is E(a) * t / r with E(a) = 1 + a + ... + a^k tokens a round (independent
acceptances). Break-even: E(a) = r / t. `--no-fp8` skips part 2. Writes bench_mtp.json and
bench_mtp.md into --out and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig
from kselect.gemma4.build import build_drafters
from kselect.gemma4.speculative import SpeculativeDecoder
from kselect.kernels.cache_ops import quantize
from kselect.kernels.tolerances import rel_err
from kselect.selector.base.files import atomic_write


def _median_runs(fn, repeats: int):
    fn(warmup=True)
    runs = [fn(warmup=False) for _ in range(repeats)]
    return runs[sorted(range(len(runs)), key=lambda i: runs[i].decode_s)[len(runs) // 2]], \
        statistics.median(r.decode_tok_s for r in runs)


def run_cell(label, cfg, sel, model, drafters, prompts, calib, opts):
    """Plain and speculative decoding on one selection. Returns rows."""
    max_len = max(map(len, prompts)) + opts.new + opts.k  # room for the k drafts of a captured round
    eng = Engine(model, sel, EngineConfig(max_seqs=len(prompts), max_seq_len=max(max_len, max(map(len, calib))),
                                          cuda_graphs=False if opts.no_cuda_graphs else None))
    scales = None
    if eng.cache.fp8 and cfg.kv_cache.scales == "calibrated":
        scales = eng.calibrate(calib)
    gen_kw = dict(temperature=opts.temperature, top_k=opts.top_k, seed=opts.seed)

    def plain_run(warmup):
        return eng.generate(prompts, 2 if warmup else opts.new, stop_at_eos=False, **gen_kw)

    plain, plain_tps = _median_runs(plain_run, opts.repeats)
    step_ms = plain.decode_s / max(1, opts.new - 1) * 1e3  # one lock-step decode step of the batch
    rows = [dict(cell=label, mode="plain", drafter="-", draft_kv_scales="-", decode_tok_s=plain_tps,
                 speedup=1.0, acceptance_rate=None, mean_accepted_length=1.0, target_passes=opts.new - 1,
                 identical=None, cuda_graphs=plain.cuda_graphs, step_ms=step_ms)]
    for name, drafter in drafters:
        sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=opts.k)

        def spec_run(warmup, sd=sd):  # the warm-up runs whole rounds: it captures the graphs
            return sd.generate(prompts, min(opts.new, 2 * opts.k + 2) if warmup else opts.new, stop_at_eos=False,
                               **gen_kw)

        res, tps = _median_runs(spec_run, opts.repeats)
        st = res.stats
        round_ms = res.decode_s / max(1, res.target_passes) * 1e3  # one batched draft + verify round
        rows.append(dict(round_ms=round_ms, graph_rounds=res.graph_rounds, notes=res.notes,
                         curve=acceptance_curve(opts.k, step_ms, round_ms),
            cell=label, mode="speculative", drafter=name,
            draft_kv_scales="/".join(sorted(set(sd.scales_mode.values()))), decode_tok_s=tps,
            speedup=tps / plain_tps, acceptance_rate=st.acceptance_rate, mean_accepted_length=st.mean_accepted_length,
            target_passes=res.target_passes, acceptance_at=st.to_dict()["acceptance_at"],
            identical=(res.tokens == plain.tokens) if opts.temperature <= 0 else None, cuda_graphs=res.cuda_graphs,
            draft_logit_rel_err=None))
    return rows, eng, scales


def tokens_per_round(a: float, k: int) -> float:
    """Expected tokens a round emits when each draft is accepted with probability a (independently)."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def acceptance_for(target_len: float, k: int) -> float | None:
    """The per-draft acceptance a with tokens_per_round(a) = target_len (None: out of reach)."""
    if target_len <= 1:
        return 0.0
    if target_len > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tokens_per_round(mid, k) < target_len else (lo, mid)
    return hi


def acceptance_curve(k: int, step_ms: float, round_ms: float) -> dict:
    """Speed-up over plain decoding as a function of the per-draft acceptance a, from measured times."""
    ratio = round_ms / step_ms
    return dict(round_over_step=ratio, break_even_mean_len=ratio, break_even_acceptance=acceptance_for(ratio, k),
                mean_len_for_1_6x=1.6 * ratio, acceptance_for_1_6x=acceptance_for(1.6 * ratio, k),
                speedup_at={f"{a:.1f}": tokens_per_round(a, k) / ratio for a in
                            (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)})


def draft_logit_error(model, drafter, sel_fp8, sel_plain, prompts, calib, opts) -> float:
    """rel err of one draft step's logits over the FP8 cache vs over a model-dtype cache holding the
    same K/V (the FP8 cache is the quantized copy of the plain one, with the calibrated scales)."""
    max_len = max(max(map(len, prompts)), max(map(len, calib)))
    n = len(prompts)
    plain = Engine(model, sel_plain, EngineConfig(max_seqs=n, max_seq_len=max_len, cuda_graphs=False))
    sd0 = SpeculativeDecoder(plain, drafter, sel_plain, num_speculative_tokens=1)
    logits, hidden = sd0.target_forward(list(range(n)), prompts)
    inputs = ([int(lg[-1].argmax()) for lg in logits], [h[-1] for h in hidden])
    ref = sd0.propose(list(range(n)), *inputs, [1] * n, return_logits=True)[2]
    fp8 = Engine(model, sel_fp8, EngineConfig(max_seqs=n, max_seq_len=max_len, cuda_graphs=False))
    fp8.calibrate(calib)
    sd = SpeculativeDecoder(fp8, drafter, sel_fp8, num_speculative_tokens=1)
    sd.target_forward(list(range(n)), prompts)  # lengths and blocks; the K/V are replaced below
    for kind, g in fp8.cache.groups.items():
        src = plain.cache.groups[kind]
        for i in g.producers:
            g.k[i].copy_(quantize(src.k[i], g.k_scale[i], g.dtype))
            g.v[i].copy_(quantize(src.v[i], g.v_scale[i], g.dtype))
    got = sd.propose(list(range(n)), *inputs, [1] * n, return_logits=True)[2]
    return rel_err(torch.cat(got), torch.cat(ref))


def markdown(meta, rows) -> str:
    lines = [f"# Gemma-4 MTP speculative decoding ({meta['model']}, {meta['device']})", "",
             f"commit {meta['commit']}; {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}", "",
             f"batch {meta['batch']}, prompt {meta['prompt_len']} tokens, {meta['new']} new tokens, k={meta['k']}, "
             f"{'greedy' if meta['temperature'] <= 0 else 'T=' + str(meta['temperature'])}; median of "
             f"{meta['repeats']} runs; {meta['when']}", "",
             "| cell | mode | drafter | draft KV scales | decode tok/s | vs plain | acceptance | mean len | "
             "target passes | == plain | draft logit err vs plain cache |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}"
        same = "-" if r["identical"] is None else ("yes" if r["identical"] else "**NO**")
        err = "-" if r.get("draft_logit_rel_err") is None else f"{r['draft_logit_rel_err']:.3f}"
        lines.append(f"| {r['cell']} | {r['mode']} | {r['drafter']} | {r['draft_kv_scales']} | "
                     f"{r['decode_tok_s']:,.0f} | {r['speedup']:.2f}x | {acc} | {r['mean_accepted_length']:.2f} | "
                     f"{r['target_passes']} | {same} | {err} |")
    lines += ["", "acceptance = accepted / proposed drafts; mean len = tokens per verification pass and sequence "
              "(1 + accepted). Seeded `random` drafters accept almost nothing; the `copy` init proposes the last "
              "token again (a heuristic, not a trained drafter). Draft logit err: one draft step over the FP8 cache "
              "vs over a model-dtype cache with the same K/V.", ""]
    spec = [r for r in rows if r["mode"] == "speculative" and r.get("curve")]
    if spec:
        alphas = list(spec[0]["curve"]["speedup_at"])
        lines += ["## Speed-up as a function of acceptance", "",
                  "From the measured times: plain step t, speculative round r (k draft steps + one verify pass; "
                  "its cost does not depend on what is accepted). Speed-up at per-draft acceptance a = "
                  "(1 + a + ... + a^k) * t / r.", "",
                  "| cell | drafter | graphs | plain step ms | round ms | r/t = break-even mean len | break-even a | "
                  "a for 1.6x | " + " | ".join(f"a={a}" for a in alphas) + " |",
                  "|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(alphas)]
        step = {r["cell"]: r["step_ms"] for r in rows if r["mode"] == "plain"}
        for r in spec:
            c = r["curve"]
            fmt = lambda x: "out of reach" if x is None else f"{x:.2f}"  # noqa: E731
            lines.append(f"| {r['cell']} | {r['drafter']} | {'yes' if r['cuda_graphs'] else 'no'} | "
                         f"{step[r['cell']]:.2f} | {r['round_ms']:.2f} | {c['break_even_mean_len']:.2f} | "
                         f"{fmt(c['break_even_acceptance'])} | {fmt(c['acceptance_for_1_6x'])} | "
                         + " | ".join(f"{v:.2f}x" for v in c["speedup_at"].values()) + " |")
        lines.append("")
    if meta.get("warnings"):
        lines += ["selector warnings:", ""] + [f"- {w}" for w in meta["warnings"]] + [""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--k", type=int, default=None, help="draft tokens per round (default: spec_decode's)")
    ap.add_argument("--drafter", help="an HF Gemma4AssistantForCausalLM folder")
    ap.add_argument("--inits", default="random,copy", help="seeded tiny drafters without --drafter")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--no-fp8", action="store_true", help="skip the calibrated-FP8 copied vs unit scales part")
    opts, overrides = ap.parse_known_args(argv)
    if not any(o.startswith("spec_decode=") for o in overrides):
        overrides = overrides + ["spec_decode=mtp"]
    cfg, sel = select(overrides)
    opts.k = opts.k or cfg.spec_decode.num_speculative_tokens
    model, _, source = build_model(cfg, opts.seed)
    if model.device.type == "cpu" and sum(p.numel() for p in model.parameters()) < 5e7:
        torch.set_num_threads(1)
    drafters = build_drafters(cfg, model, checkpoint=opts.drafter, seed=opts.seed + 1,
                              inits=tuple(x for x in opts.inits.split(",") if x))
    g = torch.Generator().manual_seed(opts.seed)
    v = model.args.vocab_size
    prompts = torch.randint(3, v, (opts.batch, opts.prompt_len), generator=g).tolist()
    calib = torch.randint(3, v, (2, max(16, opts.prompt_len)), generator=g).tolist()
    print(f"model {cfg.model.name} ({source}) on {model.device}; batch {opts.batch}, k={opts.k}", flush=True)

    base = [o for o in overrides if not o.startswith(("kv_cache", "spec_decode.copy_target_kv_scales"))]
    label = f"kv {cfg.kv_cache.dtype}/{cfg.kv_cache.scales}"
    rows, _, _ = run_cell(label, cfg, sel, model, drafters, prompts, calib, opts)
    warnings = sorted({w.text for gr in sel.groups for w in gr.warnings if (w.rule or "").startswith("mtp-")})
    if not opts.no_fp8:
        plain_sel = select(base + ["kv_cache=auto"])[1]
        for copy in (True, False):
            cell = base + ["kv_cache=fp8", "kv_cache.scales=calibrated", f"spec_decode.copy_target_kv_scales={str(copy).lower()}"]
            c_cfg, c_sel = select(cell)
            warnings += sorted({w.text for gr in c_sel.groups for w in gr.warnings if (w.rule or "").startswith("mtp-")})
            lab = f"kv fp8/calibrated, draft scales {'copied' if copy else 'unit'}"
            r, _, scales = run_cell(lab, c_cfg, c_sel, model, drafters, prompts, calib, opts)
            for row in r:
                if row["mode"] == "speculative":
                    d = dict(drafters)[row["drafter"]]
                    row["draft_logit_rel_err"] = draft_logit_error(model, d, c_sel, plain_sel, prompts, calib, opts)
                row["k_scale_range"] = [min(s[0] for s in scales.values()), max(s[0] for s in scales.values())]
            rows += r
    from kselect.provenance import provenance  # the project's commit and tool versions

    meta = dict(runtime=_versions(), model=cfg.model.name, source=source, device=str(model.device), batch=opts.batch,
                prompt_len=opts.prompt_len, new=opts.new, k=opts.k, temperature=opts.temperature, repeats=opts.repeats,
                when=time.strftime("%Y-%m-%d %H:%M:%S"), environment=sel.environment, overrides=overrides,
                warnings=sorted(set(warnings)), **provenance())
    opts.out.mkdir(parents=True, exist_ok=True)
    atomic_write(opts.out / "bench_mtp.json", json.dumps(dict(meta=meta, rows=rows), indent=2, default=str))
    md = markdown(meta, rows)
    atomic_write(opts.out / "bench_mtp.md", md)
    print(md)
    bad = [r for r in rows if r["identical"] is False]
    return 1 if bad else 0


def _versions() -> dict:
    out = dict(torch=torch.__version__, cuda=torch.version.cuda)
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    return out




if __name__ == "__main__":
    from kselect.commands.run import script_main as cli

    cli(main)  # every error: exit 2, one paragraph (--debug: traceback)
