"""E4B's batch-16 decode attention (16 sequences x 520 keys, page 16) on kernels/triton_paged.py's small launch, one
or two programs an SM, with and without 32-bit cache offsets (`OFFSETS_32`), and on wider key tiles with more warps
(WIDE_TILES), a call at a time (issue #52).

    python3 -m kselect.measurement.kernels.attn_small_b16 --out $OUT/A

Each layer kind and variant is a CUDA graph of 8 calls over rotating K/V copies (no L2 reuse;
kernel_timing.time_graph), median of 7 replays, no PDL. Writes --out/attn.json (atomically): us a call, GB/s of the
keys and values read once, and the largest difference from the first variant's output (two programs an SM split
the keys another way, so their fp32 sums differ in order). A variant that fails to launch (a tile larger than shared
memory) is recorded with its error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

BATCH, KEYS, PAGE, KV_HEADS, GROUP = 16, 520, 16, 2, 4
KINDS = {"sliding": (256, 511), "full": (512, -1)}  # head dim, window_left (-1: none)
VARIANTS = {"x1": {}, "x1_off32": dict(off32=True), "x2": dict(per_sm=2), "x2_off32": dict(per_sm=2, off32=True)}
# Wider key tiles and more warps: fewer tiles walked in series a program, two warps a scheduler. Each was slower alone
# than the 32-key tile (bench/results/h100/attn_wide/), so none became a step variant.
WIDE_TILES = {"n64": dict(block_n=64), "n64_w8": dict(block_n=64, warps=8),
              "n64_w8_s1": dict(block_n=64, warps=8, stages=1), "n128_w4_s1": dict(block_n=128, warps=4, stages=1),
              "n128_w8_s1": dict(block_n=128, warps=8, stages=1), "n32_w8": dict(warps=8),
              "n64_w8_x2": dict(block_n=64, warps=8, per_sm=2),
              "n128_w8_s1_x2": dict(block_n=128, warps=8, stages=1, per_sm=2)}
VARIANTS.update(WIDE_TILES)
COPIES = 8


def measure() -> dict:
    from kselect.kernels import triton_paged as T
    from kselect.measurement.kernel_timing import time_graph

    torch.manual_seed(0)
    dev, pages = "cuda", BATCH * -(-KEYS // PAGE)
    res = {}
    for kind, (d, window) in KINDS.items():
        ks = [torch.randn(pages, PAGE, KV_HEADS, d, device=dev, dtype=torch.bfloat16) for _ in range(COPIES)]
        vs = [torch.randn(pages, PAGE, KV_HEADS, d, device=dev, dtype=torch.bfloat16) for _ in range(COPIES)]
        q = torch.randn(BATCH, KV_HEADS * GROUP, d, device=dev, dtype=torch.bfloat16)
        tables = torch.randperm(pages, device=dev, dtype=torch.int32).view(BATCH, -1)
        cu = torch.arange(BATCH + 1, device=dev, dtype=torch.int32)
        used = torch.full((BATCH,), KEYS, device=dev, dtype=torch.int32)
        mb = 2 * BATCH * min(KEYS, window + 1 if window >= 0 else KEYS) * KV_HEADS * d * 2 / 1e6

        def call(i):
            return T.paged_attention_triton(q, ks[i], vs[i], cu, used, tables, 1.0, max_seqlen_q=1, max_seqlen_k=KEYS,
                                            window_left=window)

        first = None
        for name, switches in VARIANTS.items():
            switches = {"per_sm": 1, **switches}  # one program an SM unless the variant says: not the card's rule
            off32 = switches.pop("off32", False)
            try:
                with T.small_launch(batch=BATCH, **switches), T.offsets_32(off32):
                    got = call(0)
                    first = got if first is None else first
                    us = time_graph([lambda i=i: call(i) for i in range(COPIES)], 7) * 1e3
            except Exception as e:  # e.g. a tile too large for shared memory: recorded, the next variant runs
                res[f"{kind}/{name}"] = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
                print(f"{kind:8s} {name:9s} failed: {type(e).__name__}", flush=True)
                continue
            diff = float((got.float() - first.float()).abs().max())
            res[f"{kind}/{name}"] = dict(us=us, gbs=mb / us * 1e3, max_diff=diff)
            print(f"{kind:8s} {name:9s} {us:7.2f} us  {mb / us * 1e3:6.0f} GB/s  max diff {diff:.1e}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kselect.measurement.kernels.attn_small_b16",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for attn.json")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("attn_small_b16: needs a CUDA GPU (it times kernels)", file=sys.stderr)
        return 2
    from kselect.measurement.e2e.environment import environment
    from kselect.selector.base.files import atomic_write

    res = measure()
    env = environment(sys.argv[1:] if argv is None else argv, script="-m kselect.measurement.kernels.attn_small_b16")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "attn.json", json.dumps(dict(env=env, calls=res), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
