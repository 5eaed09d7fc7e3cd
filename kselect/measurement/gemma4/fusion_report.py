"""fusion.json rendered as fusion.md (kselect/measurement/gemma4/fusion.py writes both after every measurement)."""

from __future__ import annotations

from kselect.measurement.step_profile import CATEGORIES


def render(d: dict) -> str:
    env = d["environment"]
    out = [f"# Fused decode step vs unfused (issue #16), {env.get('gpu') or 'CPU'}", "",
           f"`{env.get('command')}` at commit `{env.get('git_commit')}`{' (dirty)' if env.get('git_dirty') else ''}, "
           f"torch {env.get('torch')}, triton {env.get('triton')}, transformers {env.get('transformers')}, "
           f"{env.get('date')}, host `{env.get('host')}`. Selection: {d.get('selection')}.", ""]
    if d.get("ceilings"):
        out.append(f"Ceilings: copy {d['ceilings'].get('copy_gbs')} GB/s, bf16 GEMM {d['ceilings'].get('bf16_gemm_tflops')} TFLOP/s.")
    for p, i in d["presets"].items():
        out.append(f"- {p}: {i['weight_gb']:.1f} GB weights, {i['decode_read_gb']:.1f} GB read a decode step, B1 roofline "
                   f"{i.get('roofline_b1_tok_s', 0):.0f} tok/s")
    out += ["", "## Decode and prefill (512-token prompts), same run", "",
            "| preset | mode | KV | batch | decode tok/s | ms/step | prefill tok/s | graphs | warm-up s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in d["runs"] + d["fp8"]:
        out.append(f"| {r['preset']} | {r['mode']} | {r['kv']} | {r['batch']} | {r['decode_tok_s']:,.1f} | "
                   f"{r['decode_ms_per_step']:.2f} | {r['prefill_tok_s']:,.0f} | {r['cuda_graphs']} | {r['warmup_s']} |")
    if d["profiles"]:
        out += ["", "## Profile of a batch-1 decode step (eager steps under torch.profiler)", "",
                "| preset | mode | kernels/step | per layer | copies/step | " + " | ".join(f"{c} ms" for c in CATEGORIES)
                + " | kernel ms | graph step ms | idle ms |", "|---" * (8 + len(CATEGORIES)) + "|"]
        for p in d["profiles"]:
            out.append(f"| {p['preset']} | {p['mode']} | {p['kernels_per_step']:.0f} | {p['kernels_per_layer']:.1f} | "
                       f"{p['copies_per_step']:.0f} | " + " | ".join(f"{p['ms_per_step'][c]:.3f}" for c in CATEGORIES)
                       + f" | {p['kernel_ms_per_step']:.3f} | {p.get('graph_step_ms', float('nan')):.3f} | "
                       f"{p.get('idle_ms_per_step', float('nan')):.3f} |")
        out += ["", "Idle ms is the graph step less the profiled kernels' time. The profiled steps launch plainly "
                "(PDL off); where the graph step runs under PDL its kernels overlap, so idle ms can be negative: "
                "that overlap."]
    if d["greedy"]:
        out += ["", "## Greedy tokens, fused vs unfused (CUDA graphs)", ""]
        for gr in d["greedy"]:
            mode = f"{gr['mode']}, " if "mode" in gr else ""  # records before it was kept: "triton"
            out.append(f"- {gr['preset']} ({mode}{gr.get('kv', 'auto')} KV, batch {gr['batch']}): last-token prefill logits max rel err {gr['prefill_logits_rel_err']:.2e}; "
                       f"greedy over {gr['steps']} steps: " + "; ".join(
                f"sequence {r['sequence']} {'identical' if r['identical'] else 'first differs at step ' + str(r['first_divergence'])}"
                for r in gr["sequences"]))
    if d["prefill"] or d["hf"]:
        out += ["", "## Prefill, batch 1: ours (fused) vs HF transformers sdpa, same tensors", "",
                "| preset | prompt | ours tok/s | HF tok/s | ratio | HF decode step ms (host-bound) | host CPU |",
                "|---|---|---|---|---|---|---|"]
        for r in d["prefill"]:
            h = next((x for x in d["hf"] if x["preset"] == r["preset"] and x["prompt_len"] == r["prompt_len"]), None)
            out.append(f"| {r['preset']} | {r['prompt_len']} | {r['prefill_tok_s']:,.0f} | "
                       + (f"{h['prefill_tok_s']:,.0f} | {r['prefill_tok_s'] / h['prefill_tok_s']:.2f}x | "
                          f"{h['decode_ms_per_step']:.1f} | {h.get('cpu', '')} |" if h else " |  |  |  |"))
    for k in ("errors", "skipped"):
        if d.get(k):
            out += ["", f"**{k}**: " + "; ".join(d[k])]
    return "\n".join(out) + "\n"
