"""Attention kernel benchmark on the H200: prefill TFLOP/s and decode GB/s (KV bytes read) for
Gemma-4 shapes, every available path, plus measured copy-bandwidth and bf16-GEMM ceilings.

Method: CUDA events around back-to-back calls that cycle through R rotated input sets (R chosen
so the rotated working set exceeds 2x L2, so nothing is served from L2); warm-up first; the
median of --reps measurements. Decode is also timed as a CUDA-graph replay (launch overhead
removed), which is what a serving engine runs. Inputs are random normal, never zeros. Sliding
layers allocate only the pages inside the window (pages outside it map to one shared page that
is never read), so long contexts fit. A path that raises is recorded with its first error line.

  python -m kselect.measurement.kernels.attention --out $OUT/bench [--budget-s 540] [--paths triton_fp8,...]

Writes bench.json and bench.md into --out and prints one line per measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from kselect.selector.base.files import atomic_write

from kselect.measurement.kernel_timing import kv_bytes, make_inputs, time_eager, time_graph

E4 = torch.float8_e4m3fn
BF = torch.bfloat16
L2_BYTES = 50 * 2**20
# name: (Hq, Hkv, D, window tokens or None)
SHAPES = {
    "31b_sliding": (32, 16, 256, 1024),
    "31b_full": (32, 4, 512, None),
    "e4b_sliding": (8, 2, 256, 512),
    "e4b_full": (8, 2, 512, None),
}
DECODE = [(1, 131072), (16, 32768), (64, 8192), (128, 4096), (256, 2048), (256, 8192)]
PREFILL = [(1, 8192), (8, 2048)]
MAX_SET_BYTES = 24 * 2**30  # skip shapes whose bf16 K+V set is larger (SDPA adds a contiguous copy)


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:200]


# ---------------------------------------------------------------- inputs
def attn_flops(b, hq, d, s, window):
    pairs = sum(min(i + 1, window) for i in range(s)) if window else s * (s + 1) // 2
    return 4.0 * b * hq * d * pairs


# ---------------------------------------------------------------- paths
def path_fns():
    from kselect.kernels import flash_attn as fa

    def triton(inp, fp8):
        from kselect.kernels.triton_paged import paged_attention_triton as t
        kw = dict(k_descale=inp["kd"], v_descale=inp["vd"]) if fp8 else {}
        return lambda: t(inp["q"], inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"], inp["scale"],
                         max_seqlen_q=inp["max_q"], max_seqlen_k=inp["max_k"], window_left=inp["window_left"], **kw)

    def fa3(build_name):
        def make(inp, fp8):
            from kselect.kernels.flash_attn_loader import load_fa3
            if inp["q"].shape[-1] > 256:
                raise NotImplementedError("FA3: head dim > 256")
            kw = dict(q_descale=inp["qd"], k_descale=inp["kd"], v_descale=inp["vd"]) if fp8 else {}
            q, build = inp["q8"] if fp8 else inp["q"], load_fa3(build_name)
            return lambda: fa.fa3_forward(q, inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"],
                                          inp["max_q"], inp["max_k"], inp["scale"], window_left=inp["window_left"],
                                          build=build, **kw)
        return make

    def fa4(inp, fp8):
        if inp["q"].shape[-1] > 256:
            raise NotImplementedError("upstream FA4 on SM90: head dim > 256")
        # num_splits=1: flash-attn-4 b36 has no split-KV on SM90 ("SplitKV not supported on SM 9.0" when its
        # heuristic picks a split, e.g. B1 at 131K), so a one-sequence long-context decode runs unsplit
        return lambda: fa.fa4_forward(inp["q"], inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"],
                                      inp["max_q"], inp["max_k"], inp["scale"], window_left=inp["window_left"],
                                      num_splits=1)

    def fork(inp, fp8):
        if inp["q"].shape[-1] != 512:
            raise NotImplementedError("FA4 fork benchmarked at d512 only (fp8 d256+window is wrong)")
        kw = dict(k_descale=inp["kd"], v_descale=inp["vd"]) if fp8 else {}
        return lambda: fa.fa4_fork_forward(inp["q"], inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"],
                                           inp["max_q"], inp["max_k"], inp["scale"], window_left=inp["window_left"],
                                           **kw)

    def flashinfer(inp, fp8):
        from kselect.kernels.flashinfer import PagedAttention  # planned once per input set, like a serving step
        q, k = inp["q"], inp["k"]
        call = PagedAttention(q.device)
        call.plan(inp["cu"], inp["seqused"], inp["table"], num_q_heads=q.shape[1], num_kv_heads=k.shape[2],
                  head_dim=q.shape[2], page_size=k.shape[1], softmax_scale=inp["scale"],
                  window_left=inp["window_left"], q_dtype=q.dtype, kv_dtype=k.dtype, out_dtype=q.dtype)
        scales = dict(k_scale=float(inp["kd"][0, 0]), v_scale=float(inp["vd"][0, 0])) if fp8 else {}
        inp["_fi"] = call  # keep alive
        return lambda: call.run(q, k, inp["v"], **scales)

    def sdpa(backend):
        def make(inp, fp8):
            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel
            be = getattr(SDPBackend, backend)
            b, qlen, L = inp["seqused"].numel(), inp["max_q"], inp["max_k"]
            hkv, d = inp["k"].shape[2], inp["k"].shape[3]
            if inp["window_left"] >= 0 and qlen > 1:
                raise NotImplementedError("SDPA: no sliding-window prefill without a dense mask")
            keep = min(L, inp["window_left"] + 1) if inp["window_left"] >= 0 else L
            # contiguous (non-paged) copies: SDPA has no block table
            kc = inp["k"][inp["table"].long()].flatten(1, 2)[:, L - keep:L].transpose(1, 2).contiguous()
            vc = inp["v"][inp["table"].long()].flatten(1, 2)[:, L - keep:L].transpose(1, 2).contiguous()
            qc = inp["q"].view(b, qlen, -1, d).transpose(1, 2)
            inp["_sdpa"] = (kc, vc)  # keep alive

            def run():
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(qc, kc, vc, is_causal=qlen > 1, enable_gqa=True,
                                                          scale=inp["scale"])
            return run
        return make

    return {
        "triton_bf16": (triton, False), "triton_fp8": (triton, True),
        "fa3_bf16": (fa3("vllm"), False), "fa3_fp8": (fa3("vllm"), True),  # vLLM's FA3 build
        "fa3up_bf16": (fa3("upstream"), False), "fa3up_fp8": (fa3("upstream"), True),  # flash-attention hopper/
        "fa4_bf16": (fa4, False), "fa4fork_bf16": (fork, False), "fa4fork_fp8kv": (fork, True),
        "flashinfer_bf16": (flashinfer, False), "flashinfer_fp8": (flashinfer, True),
        "sdpa_cudnn": (sdpa("CUDNN_ATTENTION"), False), "sdpa_flash": (sdpa("FLASH_ATTENTION"), False),
    }


# ---------------------------------------------------------------- timing
def ceilings(reps):
    n = 1 << 30  # 1 GiB each way
    a = torch.randn(n // 2, device="cuda", dtype=BF)
    b = torch.empty_like(a)
    ms = time_eager([lambda: b.copy_(a)], reps)
    copy = 2 * n / ms / 1e6  # read + write
    del a, b
    m = torch.randn(8192, 8192, device="cuda", dtype=BF)
    ms = time_eager([lambda: m @ m], reps)
    return dict(copy_gbs=copy, bf16_gemm_tflops=2 * 8192 ** 3 / ms / 1e9)


def check(fn_out, inp, fp8, quant_q):
    """Rel err of the first two sequences against the fp32 reference on the same inputs."""
    from kselect.kernels.reference import paged_attention
    from kselect.kernels.tolerances import rel_err
    out = fn_out[0] if isinstance(fn_out, (tuple, list)) else fn_out
    if out.dim() == 4:  # SDPA [B, H, q, D]
        out = out.transpose(1, 2).flatten(0, 1)
    n = 2 * inp["max_q"]
    cut = (lambda key: inp[key][:2]) if fp8 else (lambda key: None)  # noqa: E731
    ref = paged_attention(inp["q8"][:n] if quant_q else inp["q"][:n], inp["k"], inp["v"], inp["cu"][:3],
                          inp["seqused"][:2], inp["table"][:2], inp["scale"], window_left=inp["window_left"],
                          q_descale=cut("qd") if quant_q else None, k_descale=cut("kd"), v_descale=cut("vd"),
                          out_dtype=torch.float32)
    return rel_err(out[:n], ref)


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--paths", default="all")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--no-prefill", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    from kselect.provenance import provenance  # the project's commit and tool versions

    meta = dict(gpu=torch.cuda.get_device_name(), torch=str(torch.__version__), page=args.page, **provenance())
    meta.update(ceilings(args.reps))
    print(f"[{time.time() - t0:5.0f}s] ceilings: copy {meta['copy_gbs']:.0f} GB/s (read+write), "
          f"bf16 GEMM {meta['bf16_gemm_tflops']:.0f} TFLOP/s", flush=True)
    fns = path_fns()
    names = list(fns) if args.paths == "all" else args.paths.split(",")

    def record(row):
        rows.append(row)
        perf = (f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else
                f"{row.get('gbs', 0) or 0:.0f} GB/s graph {row.get('gbs_graph') or 0:.0f}")
        print(f"[{time.time() - t0:5.0f}s] {row['kind']:7s} {row['shape']:12s} B{row['b']:<4d} L{row['L']:<6d} "
              f"{row['path']:14s} {row['status']:4s} {row.get('ms') or 0:.4f} ms {perf} "
              f"rel={row.get('rel_err')} {row.get('note', '')}", flush=True)

    jobs = []
    for shape in args.shapes.split(","):
        for b, L in DECODE:
            jobs.append(("decode", shape, b, L, 1))
        if not args.no_prefill:
            for b, s in PREFILL:
                jobs.append(("prefill", shape, b, s, s))
    for kind, shape, b, L, qlen in jobs:
        hq, hkv, d, window = SHAPES[shape]
        alloc_tokens = b * (min(L, window + qlen) if window else L)
        if alloc_tokens * 2 * hkv * d * 2 > MAX_SET_BYTES:
            continue
        sets = {}
        for name in names:
            base = dict(kind=kind, shape=shape, b=b, L=L, path=name)
            if time.time() - t0 > args.budget_s:
                record(dict(base, status="skip", note="time budget"))
                continue
            make, fp8 = fns[name]
            try:
                if fp8 not in sets:
                    one = make_inputs(hq, hkv, d, window, b, L, qlen, args.page, fp8)
                    nbytes = kv_bytes(one, window)
                    r = 1 if kind == "prefill" else max(1, min(8, math.ceil(2 * L2_BYTES / max(nbytes, 1))))
                    sets[fp8] = [one] + [make_inputs(hq, hkv, d, window, b, L, qlen, args.page, fp8)
                                         for _ in range(r - 1)]
                inps = sets[fp8]
                calls = [make(i, fp8) for i in inps]
                t1 = time.time()
                first = calls[0]()
                torch.cuda.synchronize()
                row = dict(base, status="ok", first_call_s=round(time.time() - t1, 2), rotated=len(calls))
                if kind == "decode" and b <= 64 and L <= 32768:
                    row["rel_err"] = float(f"{check(first, inps[0], fp8, name in ('fa3_fp8', 'fa3up_fp8')):.2e}")
                del first
                row["ms"] = time_eager(calls, args.reps)
                if kind == "decode":
                    row["gbs"] = kv_bytes(inps[0], window) / row["ms"] / 1e6
                    try:
                        row["ms_graph"] = time_graph(calls, args.reps)
                        row["gbs_graph"] = kv_bytes(inps[0], window) / row["ms_graph"] / 1e6
                        row["pct_copy"] = round(100 * row["gbs_graph"] / meta["copy_gbs"], 1)
                    except Exception as e:  # noqa: BLE001
                        row["note"] = "graph: " + first_line(e)
                else:
                    row["tflops"] = attn_flops(b, hq, d, qlen, window) / row["ms"] / 1e9
                record(row)
            except Exception as e:  # noqa: BLE001 - record and go on
                record(dict(base, status="FAIL", note=first_line(e)))
            torch.cuda.synchronize()
        del sets
        torch.cuda.empty_cache()
        atomic_write(os.path.join(args.out, "bench.json"), json.dumps(dict(meta=meta, rows=rows), indent=1))  # partial results survive a timeout
    write_md(args.out, meta, rows)
    print(f"done in {time.time() - t0:.0f}s -> {args.out}")


def write_md(out, meta, rows):
    lines = [f"# Attention kernels on {meta['gpu']} (torch {meta['torch']}, page {meta['page']})", "",
             f"Ceilings: copy {meta['copy_gbs']:.0f} GB/s (read+write), bf16 GEMM {meta['bf16_gemm_tflops']:.0f} "
             "TFLOP/s. Decode GB/s = K+V bytes read / time (graph = CUDA-graph replay).", "",
             "| kind | shape | B | L | path | status | ms | TFLOP/s | GB/s | GB/s graph | % copy | rel_err | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda x, p: "" if x is None else f"{x:.{p}f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['kind']} | {r['shape']} | {r['b']} | {r['L']} | {r['path']} | {r['status']} | "
                     f"{f(r.get('ms'), 4)} | {f(r.get('tflops'), 0)} | {f(r.get('gbs'), 0)} | "
                     f"{f(r.get('gbs_graph'), 0)} | {r.get('pct_copy', '')} | {r.get('rel_err', '')} | "
                     f"{r.get('note', '')} |")
    atomic_write(os.path.join(out, "bench.md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    from kselect.selector.base.cli_errors import run_script

    run_script(main)  # every error: exit 2, one paragraph (--debug: traceback)
