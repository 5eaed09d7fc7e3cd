"""Where a fused decode step's time goes, kernel by kernel, in the CUDA-graph replays the engine decodes with
(issue #52): per kernel name, launches and microseconds a step; the step's span from its first kernel's start to
its last kernel's end; and the gaps between kernels inside it. Kernels launch plainly here (kernels/pdl.py off)
unless `--pdl`, where the step launches as the engine decodes (PDL at batch 1, and at 16-token steps on a card
whose rule has it: gemma4/fused.py PDL_TOKENS_BY_CARD). Under PDL a kernel's profiled time includes its wait for
the one before and kernels overlap, so each kernel is also charged its "frontier" time: how far its end moves the
step's latest end so far. Frontier times sum to the span, with or without overlap.

    python -m kselect.measurement.probes.decode_timeline --out $OUT/timeline --batches 1 16 --modes triton

Seeded random E4B weights, vLLM's Triton attention (the `pin_triton` selection of
kselect/measurement/gemma4/fusion.py; `--selection latency_triton`: the faster Triton kernel per group). Writes
--out/timeline.json and timeline.md (atomically).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

from kselect.measurement.e2e import environment
from kselect.measurement.gemma4.fusion import SELECTIONS, selection_overrides
from kselect.measurement.gemv_variants import check_modes, split_mode, variant
from kselect.measurement.profiling import GAP_MAX_US, device_kernels
from kselect.measurement.step_profile import category, free, sync


def kernels_of(events) -> list[tuple[float, float, str]]:
    """(start us, end us, name) of the profiler's device kernels, in start order."""
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in device_kernels(events)
                  if not e.name.lower().startswith(("memcpy", "memset")))


def steps_of(kernels, gap_max_us: float = GAP_MAX_US) -> list[list]:
    """The kernels split into steps where the device idled longer than `gap_max_us` (the host between replays)."""
    steps, cur, last_end = [], [], None
    for k in kernels:
        if cur and k[0] - last_end > gap_max_us:
            steps.append(cur)
            cur = []
        last_end = k[1] if not cur else max(last_end, k[1])
        cur.append(k)
    return steps + ([cur] if cur else [])


def summarize(steps: list[list]) -> dict:
    """Per step (mean over steps): span, kernel time, gaps; per kernel name: launches and microseconds."""
    n = len(steps) or 1  # none: a CPU smoke run
    span = sum(s[-1][1] - s[0][0] for s in steps) / n
    busy = sum(b - a for s in steps for a, b, _ in s) / n
    us, count, front = defaultdict(float), defaultdict(int), defaultdict(float)
    for s in steps:
        latest = s[0][0]
        for a, b, name in s:
            us[name[:100]] += b - a
            count[name[:100]] += 1
            front[name[:100]] += max(0.0, b - latest)
            latest = max(latest, b)
    names = sorted(us, key=lambda k: -us[k])
    return dict(steps=n, span_us=span, kernel_us=busy, gap_us=span - busy, kernels_per_step=sum(count.values()) / n,
                by_category={c: sum(us[k] for k in names if category(k) == c) / n
                             for c in ("gemm", "attention", "norm", "elementwise")},
                kernels=[dict(name=k, launches=count[k] / n, us=us[k] / n, mean_us=us[k] / count[k],
                              frontier_us=front[k] / n) for k in names],
                steps_seen=len(steps))


ANCHOR = "_qkv_kernel"  # one a layer (kernels/qkv_rope.py): a layer's kernels are counted from it


def by_position(steps: list[list], anchor: str = ANCHOR) -> list[dict]:
    """A layer's kernels in launch order, from each `anchor` launch to the next: per position, the kernel names seen
    there and the mean frontier us a layer. The kernels before a step's first anchor (the embedding, the first norm
    and projection) are left out; the last layer's segment runs to the step's end, so its last positions hold the LM
    head too, averaged over the layers. Where layers launch different kernels their positions mix; the names say so."""
    front, names, layers = defaultdict(float), defaultdict(set), 0
    for s in steps:
        latest, seg = s[0][0], None
        for a, b, name in s:
            f = max(0.0, b - latest)
            latest = max(latest, b)
            if name.startswith(anchor):
                seg = 0
                layers += 1
            elif seg is None:
                continue
            else:
                seg += 1
            front[seg] += f
            names[seg].add(name[:40])
    n = layers or 1
    return [dict(pos=i, names=sorted(names[i]), frontier_us=front[i] / n) for i in sorted(front)]


def profile(model, groups, prompts, steps: int, launch_pdl: bool = False) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from kselect.gemma4.engine import Engine, EngineConfig
    from kselect.kernels import pdl

    b = len(prompts)
    with contextlib.nullcontext() if launch_pdl else pdl.off():
        eng = Engine(model, groups, EngineConfig(max_seqs=b, max_seq_len=len(prompts[0]) + steps + 8, cuda_graphs=True))
        seqs = list(range(b))
        toks = eng.extend(seqs, prompts).argmax(-1).tolist()
        eng.decode(seqs, toks)  # capture
        sync()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                eng.decode(seqs, toks)
                sync()  # a host gap between steps: steps_of splits there
        graphs = eng.use_graphs
    del eng
    free()
    split = steps_of(kernels_of(prof.events()))
    out = summarize(split)
    out["layer"] = by_position(split)
    out["graphs"] = graphs
    out["pdl"] = launch_pdl
    return out


def render(data: dict) -> str:
    lines = [f"# Decode step timeline (CUDA-graph replays), {data['environment'].get('gpu', '')}", "",
             f"`{data['environment'].get('command', '')}` at `{data['environment'].get('git_commit', '')}`", ""]
    for r in data["runs"]:
        lines += [f"## {r['mode']} B{r['batch']}: span {r['span_us']:.0f} us, kernels {r['kernel_us']:.0f} us, "
                  f"gaps {r['gap_us']:.0f} us, {r['kernels_per_step']:.0f} kernels (graphs {r['graphs']}, "
                  f"PDL {'as the engine launches' if r.get('pdl') else 'off'})", "",
                  "by category (us): " + ", ".join(f"{c} {v:.0f}" for c, v in r["by_category"].items()), "",
                  "| kernel | launches | us/step | mean us | frontier us/step |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{k['name'][:70]}` | {k['launches']:.0f} | {k['us']:.1f} | {k['mean_us']:.2f} | "
                  f"{k.get('frontier_us', 0.0):.1f} |" for k in r["kernels"][:25]]
        if r.get("layer"):
            lines += ["", f"A layer from `{ANCHOR}` on (mean frontier us a layer; the last position runs to the next "
                      "layer's anchor, the LM head's segment included once a step):", "",
                      "| position | kernels | frontier us |", "|---:|---|---:|"]
            lines += [f"| {p['pos']} | {', '.join(f'`{x}`' for x in p['names'])} | {p['frontier_us']:.2f} |"
                      for p in r["layer"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="gemma4_e4b")
    ap.add_argument("--modes", nargs="+", default=["triton"], help="compute modes, each optionally +<variant> "
                    "(kselect/measurement/gemv_variants.py)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--selection", default="pin_triton", choices=[n for n in SELECTIONS if n != "base"],
                    help="the attention kernels (kselect/measurement/gemma4/fusion.py SELECTIONS)")
    ap.add_argument("--pdl", action="store_true",
                    help="launch as the engine decodes (PDL where gemma4/fused.py pdl_max_tokens says), not plainly")
    o = ap.parse_args(argv)
    check_modes(ap, o.modes)
    from kselect.gemma4 import fused
    from kselect.gemma4.build import build_model, select
    from kselect.gemma4.engine import model_groups
    from kselect.selector.base.files import atomic_write

    base = [f"platform={'auto' if torch.cuda.is_available() else 'cpu'}", f"model={o.preset}"]
    model, _, _ = build_model(select(base)[0], 0)
    fused.prepare(model)
    pin = selection_overrides(o.selection, o.prompt_len) if torch.cuda.is_available() else []  # CPU: a smoke run
    groups = model_groups(select(base + pin)[1])
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, model.args.vocab_size, (max(o.batches), o.prompt_len), generator=g).tolist()
    data = dict(environment=environment(sys.argv[1:], "-m kselect.measurement.probes.decode_timeline"),
                options=vars(o) | {"out": str(o.out)}, runs=[])
    o.out.mkdir(parents=True, exist_ok=True)
    for b in o.batches:
        for mode in o.modes:
            compute, name = split_mode(mode)
            model.set_compute(compute)
            with variant(name) if name else contextlib.nullcontext():
                r = profile(model, groups, prompts[:b], o.steps, o.pdl)
            data["runs"].append(dict(r, mode=mode, batch=b))
            print(f"{mode} B{b}: span {r['span_us']:.0f} us, kernels {r['kernel_us']:.0f}, gaps {r['gap_us']:.0f}, "
                  f"{r['kernels_per_step']:.0f} kernels", flush=True)
            atomic_write(o.out / "timeline.json", json.dumps(data, indent=1, default=str))
            atomic_write(o.out / "timeline.md", render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
