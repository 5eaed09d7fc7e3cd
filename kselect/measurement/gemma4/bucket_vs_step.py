"""One perf bucket beside one model step, kernel by kernel (#17: where explain's figures and the profiled
decode step part).

    python3 -m kselect.measurement.gemma4.bucket_vs_step --out OUT --preset gemma4_31b --kv auto fp8 \
        --selections vllm latency
    python3 -m kselect.measurement.gemma4.bucket_vs_step --phase prefill --max-seq-lens 520 4608 ...

For each selection and KV dtype (resolved as kselect/measurement/e2e/ resolves them at decode B1): the B1 decode
step of the model under CUDA graphs, profiled (every attention kernel by name: launches per step, mean
microseconds); then each group's kernel timed as `kselect perf` times its bucket (kselect/measurement/perf_timing.py
time_bucket, at the same context and page) under the profiler (the same per-kernel table), once per
`--fences` variant ("none": back to back; KIND:MIB as `kselect perf --fence`). `--phase prefill`: the B1
prefill of the prompt from the engine's prefill graph (fusion.profile_prefill), once per `--max-seq-lens`
(the graph's key bound is max_seq_len + its token bucket), beside each group's prefill bucket at the prompt's
length on the group's prefill kernel. Writes bucket_vs_step.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from kselect.measurement.e2e import free, point_overrides, selection_overrides
from kselect.measurement.step_profile import attention_kernels, category, profile_prefill, sync

from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, model_groups
from kselect.measurement.perf_targets import Target, make_target_backend
from kselect.measurement.perf_timing import parse_fence, time_bucket
from kselect.measurement.profiling import timeline_ms
from kselect.selector.base.files import atomic_write
from kselect.selector.config.vocab import claim_dtype


def model_step(model, groups, prompt, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + steps + 8, cuda_graphs=True))
    tok = int(eng.extend([0], [prompt]).argmax(-1)[0])
    eng.decode([0], [tok])
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            eng.decode([0], [tok])
        sync()
    out = dict(graphs=eng.use_graphs, kernels=attention_kernels(prof.events(), steps),
               timeline_ms=timeline_ms(prof.events(), lambda n: category(n) == "attention") / steps)
    del eng
    free()
    return out


def prefill_steps(model, groups, prompt, reps: int, max_seq_lens: list[int]) -> dict:
    """The engine's B1 prefill of `prompt`, per engine max_seq_len: attention kernels per prefill."""
    out = {}
    for n in max_seq_lens:
        p = profile_prefill(model, groups, prompt, reps, max_seq_len=n)
        out[str(n)] = dict(graphs=p["mode"] == "graph", kernels=p["attention_kernels"], timeline_ms=p["attention_timeline_ms"],
                           all_kernels=p["kernels"])
    return out


def bucket(t: Target, context: int, fence: str = "none", phase: str = "decode") -> dict:
    from torch.profiler import ProfilerActivity, profile

    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run of the script
    be = make_target_backend(t)
    f = None if fence == "none" else parse_fence(fence)
    ms = time_bucket(be, t, phase, 1, context, dev, 5, fence=f).ms  # compiled and warm; unprofiled figure
    # the kernel table: a layer fence reads its figure from its own profile (no nesting), so its gemv twin
    # (the same GEMV before each call) runs under this one
    shown = ("gemv", f[1]) if f and f[0] == "layer" else f
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        graph = time_bucket(be, t, phase, 1, context, dev, 3, fence=shown).graph
    ks = attention_kernels(prof.events(), 1.0)
    main = max(ks.values(), key=lambda k: k["launches"] * k["mean_us"]) if ks else None
    calls = main["launches"] if main else 1.0  # one main kernel a call
    for k in ks.values():
        k["launches"] /= calls
    return dict(ms=ms, graph=graph, fence=fence, kernels=ks)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="gemma4_31b")
    ap.add_argument("--kv", nargs="+", default=["auto", "fp8"])
    ap.add_argument("--selections", nargs="+", default=["vllm", "latency"])
    ap.add_argument("--rules", default="vllm_0_33_0")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new", type=int, default=64, help="the request's decode steps (e2e.py --new): the objective's point")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--platform", default="auto")
    ap.add_argument("--fences", nargs="+", default=["none"], help="bucket variants: none, or KIND:MIB (kselect perf --fence)")
    ap.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--max-seq-lens", nargs="+", type=int, default=[],
                    help="prefill: the engine's max_seq_len per profiled prefill (default: the prompt + 8)")
    o = ap.parse_args(argv)
    base = [f"platform={o.platform}", f"model={o.preset}"]
    cfg0, _ = select(base)
    model, _, _ = build_model(cfg0, 0)
    args = model.args
    prompt = torch.randint(3, args.vocab_size, (o.prompt_len,), generator=torch.Generator().manual_seed(1)).tolist()
    prefill = o.phase == "prefill"
    context = o.prompt_len if prefill else o.prompt_len + o.steps // 2  # decode: the profiled steps' mean context
    rows = []
    for sname in o.selections:
        for kv in o.kv:
            over = selection_overrides(sname, o.rules)
            point = point_overrides(SimpleNamespace(prompt_len=o.prompt_len, new=o.new), "decode B1") if sname == "latency" else []
            _, sel = select(base + [f"kv_cache={kv}", *over, *point])
            if prefill:
                steps = prefill_steps(model, model_groups(sel), prompt, o.steps, o.max_seq_lens or [o.prompt_len + 8])
            else:
                steps = {"": model_step(model, model_groups(sel), prompt, o.steps)}
            groups = []
            for g in (g for g in sel.groups if not g.draft):
                k = g.prefill if prefill and g.prefill is not None else g  # the group's kernel in this phase
                t = Target(k.backend, k.flash_attn_version, claim_dtype(g.kv_cache_dtype, args.dtype), g.head_size,
                           args.num_attention_heads, g.num_kv_heads, g.sliding_window, k.kernel_block_size, k.descale)
                groups.append(dict(kind=g.kind, layers=len(g.layers), target=t.__dict__,
                                   buckets=[bucket(t, context, f, o.phase) for f in o.fences]))
            rows.append(dict(selection=sname, kv=kv, phase=o.phase, context=context, steps=steps, groups=groups))
            print(json.dumps(rows[-1], indent=1, default=str)[:3000], flush=True)
    o.out.mkdir(parents=True, exist_ok=True)
    atomic_write(o.out / "bucket_vs_step.json", json.dumps(rows, indent=1, default=str))
    atomic_write(o.out / "bucket_vs_step.md", render(rows))
    return 0


def render(rows) -> str:
    lines = [f"# One bucket beside one model step (B1 {rows[0]['phase'] if rows else 'decode'}, attention kernels)", ""]
    for r in rows:
        per = "prefill" if r["phase"] == "prefill" else "step"
        lines += [f"## {r['selection']} kv={r['kv']} (context {r['context']})", ""]
        for n, s in r["steps"].items():
            at = f" (engine max_seq_len {n})" if n else ""
            lines.append(f"model {per}{at}, CUDA graphs {s['graphs']}: attention timeline {s['timeline_ms']:.4f} ms/{per}")
        lines += ["", "| where | kernel | launches | mean us |", "|---|---|---:|---:|"]
        for n, s in r["steps"].items():
            for k, v in s["kernels"].items():
                lines.append(f"| model {per}{f' max_seq_len {n}' if n else ''} (per {per}) | `{k}` | {v['launches']:.1f} | {v['mean_us']:.2f} |")
        for g in r["groups"]:
            for b in g["buckets"]:
                lines.append(f"| {g['kind']} bucket, fence {b['fence']}: {b['ms'] * 1e3:.2f} us/call x {g['layers']} layers "
                             f"= {b['ms'] * g['layers']:.4f} ms (page {g['target']['page']}) | | | |")
                for k, v in b["kernels"].items():
                    lines.append(f"| {g['kind']} bucket (per call) | `{k}` | {v['launches']:.2f} | {v['mean_us']:.2f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
