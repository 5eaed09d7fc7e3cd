"""Follow-ups to kselect/measurement/gemma4/fusion.py on the H200: warps per row for the add-norm kernel, where the
bf16 q/k differences against the unfused ops come from, and 31B batch-1 decode with the best warps.

    python -m kselect.measurement.gemma4.fusion_tune --out $OUT/tune
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

from kselect.measurement.e2e import environment, time_engine

from kselect.gemma4.model import RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq
from kselect.kernels import qkv_rope, rms_norm
from kselect.selector.base.files import atomic_write

WARPS = (2, 4, 8, 16, 32)


def warps_table() -> list[dict]:
    rows = []
    default = rms_norm.row_warps
    for d in (2560, 5376):
        for t in (1, 16):
            y, r = (torch.randn(t, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            w = torch.randn(d, device="cuda", dtype=torch.bfloat16)
            s = torch.ones(1, device="cuda", dtype=torch.bfloat16)
            row = dict(d=d, t=t, default=default(1 << (d - 1).bit_length()))
            for nw in WARPS:
                rms_norm.row_warps = lambda block, nw=nw: nw  # noqa: E731
                fn = lambda: rms_norm.add_rms_norm(y, r, w, 1e-6, s, w)  # noqa: E731
                fn()
                row[f"w{nw}_us"] = triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3
            rms_norm.row_warps = default
            rows.append(row)
    return rows


def diagnose() -> dict:
    """q of one layer: the kernel vs the unfused modules, stage by stage (bf16, 31B sliding shapes)."""
    g = torch.Generator().manual_seed(0)
    t, h, d = 16, 32, 256
    x = (torch.randn(t, h * d, generator=g) * 2).to("cuda", torch.bfloat16)
    n = RMSNorm(d)
    n.weight.data = torch.randn(d, generator=g)
    n = n.to("cuda", torch.bfloat16)
    pos = torch.randint(0, 5000, (t,), generator=g).cuda()
    cos, sin = rope_cos_sin(pos, rope_inv_freq(d, 10000.0), torch.bfloat16)
    out = {}
    for name, (c, s_) in dict(norm_only=(torch.ones_like(cos), torch.zeros_like(sin)), norm_rope=(cos, sin)).items():
        got = qkv_rope.qkv_norm_rope_write(x, h, 0, d, n.weight, None, c, s_, n.eps).float()
        want = apply_rope(n(x.view(t, h, d)), c, s_).float()
        diff = got - want
        out[name] = dict(frac_differ=float((diff != 0).float().mean()), rel=float(diff.norm() / want.norm()))
    xf = x.view(t, h, d).float()
    m = xf.pow(2).mean(-1, keepdim=True) + n.eps
    out["rsqrt_vs_pow"] = float(((torch.rsqrt(m) - torch.pow(m, -0.5)) != 0).float().mean())
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-decode", action="store_true", help="warps and diagnosis only")
    o = ap.parse_args(argv)
    o.out.mkdir(parents=True, exist_ok=True)
    env = environment(argv, "-m kselect.measurement.gemma4.fusion_tune")
    data = dict(environment=env, warps=warps_table(), diagnose=diagnose(), decode=[])
    print(json.dumps(data["warps"], indent=1), json.dumps(data["diagnose"], indent=1), flush=True)
    if o.no_decode:
        atomic_write(o.out / "tune.json", json.dumps(data, indent=1, default=str))
        return 0
    best = {r["d"]: min(WARPS, key=lambda nw: r[f"w{nw}_us"]) for r in data["warps"] if r["t"] == 1}

    from kselect.gemma4 import fused
    from kselect.gemma4.build import build_model, select
    from kselect.gemma4.engine import model_groups

    cfg, _ = select(["platform=auto", "model=gemma4_31b"])
    model, _, _ = build_model(cfg, 0)
    fused.prepare(model)
    _, sel = select(["platform=auto", "model=gemma4_31b", "attention.backend=TRITON_ATTN"])
    groups = model_groups(sel)
    prompt = torch.randint(3, model.args.vocab_size, (1, 512), generator=torch.Generator().manual_seed(1)).tolist()
    model.set_compute("triton")
    default = rms_norm.row_warps
    for label, fn in (("default", default), (f"best {best.get(5376)}", lambda b: best.get(5376, default(b))),
                      ("default again", default)):
        rms_norm.row_warps = fn
        r = time_engine(model, groups, prompt, 64, o.reps, None)
        data["decode"].append(dict(variant=label, decode_tok_s=r["decode_tok_s"], ms_per_step=r["decode_ms_per_step"]))
        print(label, f"{r['decode_tok_s']:.2f} tok/s", flush=True)
    rms_norm.row_warps = default
    atomic_write(o.out / "tune.json", json.dumps(data, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
