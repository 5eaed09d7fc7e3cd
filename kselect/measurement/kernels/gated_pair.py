"""One-row gated projection pairs of the bundled Gemma-4 shapes: kernels/gated_pair.py (one kernel, both layouts of
the second projection) against the two kernels it replaces (kernels/gemv.py's GELU*up GEMV, then the GEMV), per
config (issue #52).

    python3 -m kselect.measurement.kernels.gated_pair --out OUT [--models e4b] [--no-pdl] [--programs 1 2 4 64] ...

Each case runs as a CUDA graph of calls over distinct weight copies (at least 4x the 50 MB L2 in all), launched with
PDL as a batch-1 decode step launches them on SM90 (--no-pdl: plainly); the figure is the graph's time per call,
median of --reps replays (kernel_timing.time_graph). Writes gated_pair.json and gated_pair.md with GB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
from pathlib import Path

import torch

from kselect.kernels import gated_pair as P
from kselect.kernels import pdl
from kselect.kernels.gemv import gemv, gemv_gelu_mul
from kselect.measurement.kernel_timing import time_graph
from kselect.selector.base.files import atomic_write

# (name, I, K, N, paired): the MLP (gate/up then down) and the per-layer-input block (gate then projection)
SHAPES = {"e4b": [("mlp", 10240, 2560, 2560, True), ("ple", 256, 2560, 2560, False)],
          "31b": [("mlp", 21504, 5376, 5376, True)]}
# programs per SM: 1 to 4 walk several slices each (persistent); 64, capped at one a slice, hands the slices to the
# card's block scheduler in waves, as the GEMVs launch
SLICES, BLOCK_K, WARPS, PROGRAMS = (2, 4, 8), (512, 1024), (4, 8), (1, 2, 4)
L2 = 50 << 20


def _run_to_run(x, w, mul, wd, acc, kw, runs: int = 20) -> tuple[bool, float]:
    """Whether `runs` calls on the same operands give the same bits, and their largest relative difference."""
    outs = []
    for _ in range(runs):
        acc.zero_()
        outs.append(P.gated_pair(x, w, wd, acc, mul, **kw).clone())
    diff = max(float((o - outs[0]).double().norm() / outs[0].double().norm()) for o in outs)
    return all(torch.equal(o, outs[0]) for o in outs), diff


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", nargs="+", default=["e4b"], choices=sorted(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-pdl", action="store_true", help="launch plainly")
    ap.add_argument("--slices", nargs="+", type=int, default=SLICES)
    ap.add_argument("--block-k", nargs="+", type=int, default=BLOCK_K)
    ap.add_argument("--warps", nargs="+", type=int, default=WARPS)
    ap.add_argument("--programs", nargs="+", type=int, default=PROGRAMS, help="per SM (a grid is at most one a slice)")
    ap.add_argument("--layouts", nargs="+", default=["n", "t"], choices=["n", "t"])
    o = ap.parse_args(argv)
    configs = [dict(slice=s, block_k=bk, num_warps=nw, programs=p) for s, bk, nw, p in
               itertools.product(o.slices, o.block_k, o.warps, o.programs)]
    dev = "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    launches = contextlib.nullcontext if o.no_pdl else pdl.on
    for model in o.models:
        for name, inter, k, n, paired in SHAPES[model]:
            nbytes = (3 if paired else 2) * inter * k * 2
            copies = max(2, min(64, -(-4 * L2 // nbytes)))
            g = torch.Generator(device=dev).manual_seed(0)
            ws = [torch.randn(2 * inter if paired else inter, k, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
                  for _ in range(copies)]
            wds = [torch.randn(n, inter, device=dev, dtype=torch.bfloat16, generator=g) * 0.02 for _ in range(copies)]
            wts = [wd.t().contiguous() for wd in wds]
            x = torch.randn(1, k, device=dev, dtype=torch.bfloat16, generator=g)
            mul = None if paired else torch.randn(1, inter, device=dev, dtype=torch.bfloat16, generator=g)
            acc = torch.zeros(1, n, device=dev)
            ref = gemv_gelu_mul(x, ws[0], mul).double() @ wds[0].double().T
            with launches():
                base = time_graph([lambda w=w, wd=wd: gemv(gemv_gelu_mul(x, w, mul), wd) for w, wd in zip(ws, wds)],
                                  o.reps)
                best = {}
                for layout, cfg in itertools.product(o.layouts, configs):
                    seconds = wts if layout == "t" else wds
                    kw = dict(cfg, programs=cfg["programs"] * sms, down_t=layout == "t")
                    try:
                        acc.zero_()
                        P.gated_pair(x, ws[0], seconds[0], acc, mul, **kw)
                        err = float((acc.double() - ref).norm() / ref.norm())
                        ms = time_graph([lambda w=w, wd=wd: P.gated_pair(x, w, wd, acc, mul, **kw)
                                         for w, wd in zip(ws, seconds)], o.reps)
                    except Exception as e:  # noqa: BLE001 - a config that does not compile is skipped, and said
                        print(f"{model} {name} {layout} {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:120]}",
                              flush=True)
                        continue
                    if layout not in best or ms < best[layout]["ms"]:
                        best[layout] = dict(ms=ms, cfg=cfg, err=err, kw=kw)
                for b in best.values():  # run to run: the atomics' order changes the fp32 sums
                    b["runs_bit_equal"], b["run_to_run_rel"] = _run_to_run(x, ws[0], mul, wts[0] if b["kw"]["down_t"]
                                                                           else wds[0], acc, b.pop("kw"))
            r = dict(model=model, name=name, inter=inter, k=k, n=n, mb=nbytes / 1e6, copies=copies, pdl=not o.no_pdl,
                     two_kernels_ms=base, two_kernels_gbs=nbytes / base / 1e6,
                     **{f"pair_{lay}": dict(b, gbs=nbytes / b["ms"] / 1e6) for lay, b in best.items()})
            rows.append(r)
            print(json.dumps(r), flush=True)
            del ws, wds, wts
            torch.cuda.empty_cache()
    o.out.mkdir(parents=True, exist_ok=True)
    atomic_write(o.out / "gated_pair.json", json.dumps(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                                           sms=sms, rows=rows), indent=1))
    lines = ["| model | pair | I x K -> N | MB | two kernels us | GB/s | layout | one kernel us | GB/s | speed-up | "
             "config (programs per SM) | rel err | runs bit-equal |", "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---|"]
    for r in rows:
        for lay in ("n", "t"):
            b = r.get(f"pair_{lay}")
            if b:
                lines.append(f"| {r['model']} | {r['name']} | {r['inter']} x {r['k']} -> {r['n']} | {r['mb']:.1f} | "
                             f"{r['two_kernels_ms'] * 1e3:.2f} | {r['two_kernels_gbs']:.0f} | {lay} | "
                             f"{b['ms'] * 1e3:.2f} | {b['gbs']:.0f} | {r['two_kernels_ms'] / b['ms']:.3f}x | "
                             f"{b['cfg']} | {b['err']:.1e} | {b['runs_bit_equal']} ({b['run_to_run_rel']:.1e}) |")
    atomic_write(o.out / "gated_pair.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
