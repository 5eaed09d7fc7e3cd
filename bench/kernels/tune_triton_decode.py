"""Sweep our Triton split-KV decode configs (BLOCK_N, warps, stages, splits) on Gemma-4 decode shapes
and report GB/s of KV read under CUDA-graph replay, against measured copy bandwidth (H200).

  python bench/kernels/tune_triton_decode.py --out $OUT/tune [--budget-s 500]

The best config per shape is what kernels/triton_paged.pick_config should return for it.
"""

import argparse
import itertools
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from bench_attention import ceilings, kv_bytes, make_inputs, time_graph  # noqa: E402
from kernels.triton_paged import _pow2, paged_attention_triton  # noqa: E402

# (name, Hq, Hkv, D, window, B, L)
CASES = [("31b_full_d512", 32, 4, 512, None, 64, 8192), ("31b_sliding_d256", 32, 16, 256, 1024, 64, 8192),
         ("e4b_full_d512_b8", 8, 2, 512, None, 8, 32768)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=500)
    ap.add_argument("--dtypes", default="fp8,bf16")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    meta = ceilings(10)
    print(f"copy {meta['copy_gbs']:.0f} GB/s", flush=True)
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (name, hq, hkv, d, win, b, L), dt in itertools.product(CASES, args.dtypes.split(",")):
        fp8 = dt == "fp8"
        sets = [make_inputs(hq, hkv, d, win, b, L, 1, 64, fp8) for _ in range(2)]
        nbytes = kv_bytes(sets[0], win)
        g_pad = _pow2(hq // hkv)
        block_q = max(1, 16 // g_pad)
        base = -(-2 * sms // (b * hkv))
        for bn, warps, stages, mult in itertools.product((16, 32, 64, 128), (4, 8), (2, 3, 4), (1, 2, 4)):
            if time.time() - t0 > args.budget_s:
                break
            splits = max(1, base * mult)
            row = dict(case=name, dtype=dt, block_n=bn, warps=warps, stages=stages, splits=splits)
            kw = lambda i: dict(k_descale=i["kd"], v_descale=i["vd"]) if fp8 else {}  # noqa: E731
            calls = [lambda i=i: paged_attention_triton(
                i["q"], i["k"], i["v"], i["cu"], i["seqused"], i["table"], i["scale"], max_seqlen_q=1,
                max_seqlen_k=L, window_left=i["window_left"], num_splits=splits,
                config=(block_q, bn, warps, stages), **kw(i)) for i in sets]
            try:
                ms = time_graph(calls, 10)
                row.update(ms=ms, gbs=nbytes / ms / 1e6, pct_copy=round(100 * nbytes / ms / 1e6 / meta["copy_gbs"], 1))
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
    with open(os.path.join(args.out, "tune.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows, best=[dict(v) for v in best.values()]), f, indent=1)
    for v in best.values():
        print("BEST", v)


if __name__ == "__main__":
    main()
