"""E4B's projections at 16 rows as W's tile times x's (swap: W's rows the tensor-core dot's M, so wgmma on SM90), with
plain loads or through TMA, against kernels/skinny_gemm.py at its card config (issue #52). The prototype of
kernels/skinny_gemm.py's `swap` entry (its plain-load path): here split-K adds fp32 partials with atomics into an fp32
output, for timing only.

    python3 -m kselect.measurement.kernels.skinny_swap --out $OUT/S [--shapes lm_head down]

Each shape and config is a CUDA graph of calls over rotating weight copies (no L2 reuse; kernel_timing.time_graph),
median of 5 replays. Writes --out/swap.json and swap.md (atomically): per shape today's kernel, the best swap config
and every config tried.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

SHAPES = {"qkv": (3072, 2560), "o": (2560, 2048), "gate_up": (20480, 2560), "down": (2560, 10240),
          "ple_gate": (256, 2560), "ple_proj": (2560, 256), "lm_head": (262144, 2560)}


@triton.jit
def _swap(x_ptr, w_ptr, w_desc, out_ptr, m, n, k, k_split, stride_x, stride_w, stride_out, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, TMA: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    ms = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_K)
    k0 = tl.program_id(1) * k_split
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for kk in range(k0, tl.minimum(k, k0 + k_split), BLOCK_K):
        if TMA:
            wt = w_desc.load([tl.program_id(0) * BLOCK_N, kk])
        else:
            wt = tl.load(w_ptr + rows.to(tl.int64)[:, None] * stride_w + (kk + cols)[None, :], mask=row_ok[:, None],
                         other=0.0)
        xt = tl.load(x_ptr + ms[:, None] * stride_x + (kk + cols)[None, :], mask=(ms < m)[:, None], other=0.0)
        acc = tl.dot(wt, tl.trans(xt), acc)
    at = out_ptr + ms[None, :] * stride_out + rows[:, None]
    ok = row_ok[:, None] & (ms < m)[None, :]
    if SPLIT == 1:
        tl.store(at, acc.to(out_ptr.dtype.element_ty), mask=ok)
    else:
        tl.atomic_add(at, acc, mask=ok, sem="relaxed")


def swap(x, w, block_n=64, block_k=128, stages=4, split=1, tma=False):
    """x [16, K] @ w.T [K, N] by _swap (K a multiple of block_k; with tma, N of block_n)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    out = torch.zeros(m, n, dtype=torch.float32 if split > 1 else x.dtype, device=x.device)
    k_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    desc = TensorDescriptor.from_tensor(w, [block_n, block_k]) if tma else w
    _swap[(triton.cdiv(n, block_n), split)](x, w, desc, out, m, n, k, k_split, x.stride(0), w.stride(0), out.stride(0),
                                            BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split, TMA=tma,
                                            num_warps=4, num_stages=stages)
    return out


def measure(names: list[str]) -> dict:
    from kselect.kernels.cards import card_of
    from kselect.kernels.skinny_gemm import _params, skinny_gemm
    from kselect.measurement.kernel_timing import time_graph

    torch.manual_seed(0)
    res = {}
    for name in names:
        n, k = SHAPES[name]
        mb = n * k * 2 / 1e6
        copies = max(2, min(64, int(400 // mb) + 1))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(copies)]
        x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ ws[0].float().T
        row = dict(MB=mb, base_us=time_graph([lambda w=w: skinny_gemm(x, w) for w in ws], 5) * 1e3,
                   base_cfg=_params(n, k, {}, card_of(x)), swap=[])
        splits = [1] if n > 4096 else [1, 2, 4, 8]
        for tma, bn, bk, split in itertools.product((False, True), (64, 128), (128, 256), splits):
            if tma and n % bn:
                continue
            cfg = dict(tma=tma, bn=bn, bk=bk, st=4, sp=split)
            f = lambda w, c=cfg: swap(x, w, c["bn"], c["bk"], c["st"], c["sp"], c["tma"])  # noqa: E731
            rel = float(((f(ws[0]).float() - ref).abs().max() / ref.abs().max()))
            row["swap"].append(dict(cfg, us=time_graph([lambda w=w: f(w) for w in ws], 5) * 1e3, rel=rel))
        row["best"] = min(row["swap"], key=lambda r: r["us"])
        res[name] = row
        print(f"{name} {mb:.1f} MB: today {row['base_us']:.2f} us, swap {row['best']['us']:.2f} us "
              f"({row['base_us'] / row['best']['us']:.3f}x) {row['best']}", flush=True)
        del ws
    return res


def render(res: dict, env: dict) -> str:
    out = ["# E4B's projections at 16 rows: W's tile times x's (swap) against kernels/skinny_gemm.py", "",
           f"`{env['command']}` at `{env['git_commit']}` on {env.get('gpu')}", "",
           "| shape | MB | today us | GB/s | its config | swap us | GB/s | today / swap | swap config |",
           "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for name, r in res.items():
        b = r["best"]
        out.append(f"| {name} | {r['MB']:.1f} | {r['base_us']:.2f} | {r['MB'] / r['base_us'] * 1e3:.0f} | "
                   f"{r['base_cfg']} | {b['us']:.2f} | {r['MB'] / b['us'] * 1e3:.0f} | {r['base_us'] / b['us']:.3f} | "
                   f"{ {k: b[k] for k in ('tma', 'bn', 'bk', 'st', 'sp')} } |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kselect.measurement.kernels.skinny_swap",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for swap.json and swap.md")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("skinny_swap: needs a CUDA GPU (it times kernels)", file=sys.stderr)
        return 2
    from kselect.measurement.e2e.environment import environment
    from kselect.selector.base.files import atomic_write

    res = measure(args.shapes)
    env = environment(sys.argv[1:] if argv is None else argv, script="-m kselect.measurement.kernels.skinny_swap")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "swap.json", json.dumps(dict(env=env, shapes=res), indent=1))
    atomic_write(args.out / "swap.md", render(res, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
