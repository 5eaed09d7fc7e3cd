"""Sweep our Triton split-KV decode configs (BLOCK_N, warps, stages, splits, fp8 widening path) on Gemma-4
decode shapes and report GB/s of KV read under CUDA-graph replay, against measured copy bandwidth (H200).

  python -m kselect.measurement.kernels.tune_triton_decode --out $OUT/tune [--budget-s 140] [--dtypes fp8,bf16]
  python -m kselect.measurement.kernels.tune_triton_decode --out $OUT/splits --small --dtypes bf16,fp8   # B1 x 544
  python -m kselect.measurement.kernels.tune_triton_decode --out $OUT/S --small --cases e4b_sliding_b16,e4b_full_b16 --dtypes bf16 --per-sm 4 --warps 4,8   # B16 x 520

--small sweeps the split count at the model steps' small-batch shapes (31B and E4B, B1 and B4 x 544, B16 x 520), where few
programs run (kv heads x splits) and each call is bound by latency, not bandwidth: splits of 1-4 BLOCK_N
tiles, over enough input sets that the KV is read from HBM, not L2 (as in a model step).

The budget is split evenly over the (shape, dtype) pairs, most promising configs first, so one call of
<= 150 s covers all three shapes for fp8. The first row of each shape is pick_config's default; the best
per shape is what kernels/triton_paged.pick_config should return for it (per dtype).
asm=1: e4m3 widened by inline-asm cvt.rn.f16x2.e4m3x2 at the load (fp16 tile -> ldmatrix);
asm=0: Triton's own fp8 -> fp16 cast (fp8 tile read back from shared memory bytewise for V).
"""

import argparse
import itertools
import json
import os
import time

import torch

from kselect.measurement.kernel_timing import kv_bytes, make_inputs, time_eager, time_graph
from kselect.kernels.triton_paged import _pow2, paged_attention_triton, pick_config

# (name, Hq, Hkv, D, window, B, L)
CASES = [("31b_sliding_d256", 32, 16, 256, 1024, 64, 8192), ("31b_full_d512", 32, 4, 512, None, 64, 8192),
         ("e4b_full_d512_b8", 8, 2, 512, None, 8, 32768)]
SMALL = [("31b_sliding_b1", 32, 16, 256, 1024, 1, 544), ("31b_full_b1", 32, 4, 512, None, 1, 544),
         ("e4b_sliding_b1", 8, 2, 256, 512, 1, 544), ("e4b_full_b1", 8, 2, 512, None, 1, 544),
         ("31b_sliding_b4", 32, 16, 256, 1024, 4, 544), ("e4b_sliding_b4", 8, 2, 256, 512, 4, 544),
         ("e4b_sliding_b16", 8, 2, 256, 512, 16, 520), ("e4b_full_b16", 8, 2, 512, None, 16, 520)]
COLD_BYTES = 150 * 2**20  # input sets x KV bytes >= 3x the H200's 50 MB L2


def grid(d, dt, default):
    """Configs (BLOCK_N, warps, stages, asm, split multiplier), default first, then most likely first."""
    if dt == "fp8":
        bns = (64, 32, 128) if d >= 512 else (128, 64, 256)
        out = [(bn, w, st, 1, m) for bn, st, w, m in itertools.product(bns, (3, 2, 4), (4, 8), (1, 2))]
        out += [(bn, w, st, 0, 1) for bn, w, st in ((32, 4, 2), (64, 4, 2))]  # Triton's cast, for the record
    else:
        bns = (32, 64) if d >= 512 else (64, 128, 32)
        out = [(bn, w, st, 0, m) for bn, st, w, m in itertools.product(bns, (4, 2, 3), (4, 8), (1, 2))]
    return [default] + [c for c in out if c != default]


def small_grid(d, dt, default, warps=(4,)):
    """(BLOCK_N, warps, stages, asm, key tiles per split), pick_config's default with its 4 tiles first."""
    bns = (32, 16) if d >= 512 else (64, 32)
    asm = int(dt == "fp8")
    out = [(bn, w, st, asm, t) for bn, w, st, t in itertools.product(bns, warps, (2, 3), (1, 2, 3, 4))]
    return [default] + [c for c in out if c != default]


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive integer")
    return int(text)


def _warps(text: str) -> tuple[int, ...]:
    allowed = ("1", "2", "4", "8", "16")
    if not text or any(w not in allowed for w in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated warp counts, each one of {', '.join(allowed)}")
    return tuple(int(w) for w in text.split(","))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=140)
    ap.add_argument("--dtypes", default="fp8")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: every case of the set)")
    ap.add_argument("--copy-gbs", type=float, default=0, help="skip the copy measurement (H200: 4209)")
    ap.add_argument("--small", action="store_true", help="the small-batch split sweep (SMALL) instead of CASES")
    ap.add_argument("--per-sm", type=_positive, default=2, help="--small: at most this many programs an SM")
    ap.add_argument("--warps", type=_warps, default=(4,), help="--small: warps a program to sweep, comma-separated "
                    "powers of two up to 16")
    args = ap.parse_args()
    pool = SMALL if args.small else CASES
    names = args.cases.split(",") if args.cases else [c[0] for c in pool]
    unknown = [n for n in names if n not in {c[0] for c in pool}]
    if unknown:
        ap.error(f"--cases: {', '.join(unknown)} unknown; this set has {', '.join(c[0] for c in pool)}")
    cases = [c for c in pool if c[0] in names]
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    copy = args.copy_gbs
    if not copy:
        a = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)
        b = torch.empty_like(a)
        copy = 2 * a.numel() * 2 / time_eager([lambda: b.copy_(a)], 10) / 1e6
        del a, b
    print(f"copy {copy:.0f} GB/s", flush=True)
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    jobs = [(c, dt) for c in cases for dt in args.dtypes.split(",")]
    for ji, ((name, hq, hkv, d, win, b, L), dt) in enumerate(jobs):
        deadline = t0 + (ji + 1) * args.budget_s / len(jobs)
        fp8 = dt == "fp8"
        first = make_inputs(hq, hkv, d, win, b, L, 1, 64, fp8)
        nbytes = kv_bytes(first, win)
        n_sets = min(64, max(2, -(-COLD_BYTES // nbytes))) if args.small else 2
        sets = [first] + [make_inputs(hq, hkv, d, win, b, L, 1, 64, fp8) for _ in range(n_sets - 1)]
        g_pad = _pow2(hq // hkv)
        bq, dbn, dw, dst, dasm = pick_config(_pow2(d), g_pad, 1, True, False, fp8)
        base = -(-(args.per_sm if args.small else 2) * sms // (b * hkv))
        span = L if win is None else min(L, win)
        default = (dbn, dw, dst, int(dasm), 4 if args.small else 1)
        configs = small_grid(d, dt, default, args.warps) if args.small else grid(d, dt, default)
        for bn, warps, stages, asm, mult in configs:
            if time.time() > deadline:
                break
            if args.small:  # mult: key tiles per split; as many programs as that gives, up to 2 per SM
                splits = max(1, min(base, -(-span // (mult * bn)), 64))
            else:
                splits = max(1, min(base * mult, -(-span // (4 * bn)), 64))
            row = dict(case=name, dtype=dt, block_n=bn, warps=warps, stages=stages, asm=asm, splits=splits, sets=n_sets)
            kw = lambda i: dict(k_descale=i["kd"], v_descale=i["vd"]) if fp8 else {}  # noqa: E731
            calls = [lambda i=i: paged_attention_triton(
                i["q"], i["k"], i["v"], i["cu"], i["seqused"], i["table"], i["scale"], max_seqlen_q=1,
                max_seqlen_k=L, window_left=i["window_left"], num_splits=splits,
                config=(bq, bn, warps, stages, bool(asm)), **kw(i)) for i in sets]
            try:
                ms = time_graph(calls, 10)
                row.update(ms=round(ms, 4), gbs=round(nbytes / ms / 1e6), pct_copy=round(100 * nbytes / ms / 1e6 / copy, 1))
            except Exception as e:  # noqa: BLE001 - out of shared memory etc.
                row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            rows.append(row)
            print(f"[{time.time() - t0:4.0f}s] {row}", flush=True)
        del sets
        torch.cuda.empty_cache()
    best = {}
    for r in rows:
        k = (r["case"], r["dtype"])
        if "gbs" in r and (k not in best or r["gbs"] > best[k]["gbs"]):
            best[k] = r
    from kselect.selector.base.files import atomic_write

    atomic_write(os.path.join(args.out, "tune.json"), json.dumps(dict(meta=dict(copy_gbs=copy), rows=rows, best=list(best.values())), indent=1))
    for v in best.values():
        print(f"BEST {v['case']} {v['dtype']}: {v['ms']} ms {v['gbs']} GB/s = {v['pct_copy']}% of copy "
              f"(BLOCK_N {v['block_n']}, {v['warps']} warps, {v['stages']} stages, asm {v['asm']}, splits {v['splits']})")


if __name__ == "__main__":
    from kselect.selector.base.cli_errors import run_script

    run_script(main)  # every error: exit 2, one paragraph (--debug: traceback)
