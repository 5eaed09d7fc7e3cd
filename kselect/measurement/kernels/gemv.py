"""Decode projections of the bundled Gemma-4 shapes: cuBLAS (F.linear) against kernels/gemv.py (#16) or
kernels/skinny_gemm.py (#52) per config.

    python3 -m kselect.measurement.kernels.gemv --out OUT [--rows 1] [--models e4b 31b] [--kernel skinny]
    python3 -m kselect.measurement.kernels.gemv --table-from OUT/skinny.json   # the card's skinny shapes
    python3 -m kselect.measurement.kernels.gemv --step-table-from A.json B.json --step-source TEXT   # its step table

Each shape runs as a CUDA graph of calls over distinct weight copies (at least 4x the 50 MB L2 in all),
as a model step streams every layer's weights from HBM; the figure is the graph's time per call
(kernels plus the gaps between them), median of --reps replays (kernel_timing.time_graph).
Writes gemv.json and gemv.md with GB/s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from kselect.measurement.kernel_timing import time_graph

from kselect.kernels import gemv_tma
from kselect.kernels.gemv import gemv
from kselect.kernels.skinny_gemm import CARD_CONFIGS, STEP_CONFIGS, skinny_gemm
from kselect.selector.base.files import atomic_write

# (name, N, K): the fused decode path's projections (gemma4/fused.py), conf/model's sizes
SHAPES = {
    "e4b": [("qkv", 3072, 2560), ("o", 2560, 2048), ("gate_up", 20480, 2560), ("down", 2560, 10240),
            ("ple_gate", 256, 2560), ("ple_proj", 2560, 256), ("lm_head", 262144, 2560),
            # the full layers' q/k/v and o (head_dim 512), the KV-sharing layers' q alone, the per-layer inputs' model
            # projection (42 x 256 rows)
            ("qkv_full", 6144, 2560), ("o_full", 2560, 4096), ("q", 2048, 2560), ("q_full", 4096, 2560),
            ("ple_model", 10752, 2560)],
    "31b": [("qkv", 16384, 5376), ("o", 5376, 8192), ("gate_up", 43008, 5376), ("down", 5376, 21504)],
}
KERNELS = {
    "gemv": (gemv, [dict(block_n=bn, block_k=bk, num_warps=nw) for bn, bk, nw in
                    itertools.product((2, 4, 8, 16), (256, 512, 1024), (4, 8))]),
    # the GEMV's W loads one chunk ahead of its multiplies (ahead=1) against the same tiles without
    "gemv_ahead": (gemv, [dict(block_n=bn, block_k=bk, num_warps=4, ahead=a) for bn, bk, a in
                          itertools.product((2, 4, 8), (256, 512, 1024), (0, 1))]),
    # W through TMA, `stages` chunks in flight a program (one row: the GEMV's rows)
    "gemv_tma": (gemv_tma.gemv_tma, [dict(block_n=bn, block_k=bk, stages=st, num_warps=4) for bn, bk, st in
                                     itertools.product((1, 2, 4, 8, 16), (128, 256), (2, 3, 4, 6))]),
    "skinny": (skinny_gemm, [dict(block_n=bn, block_k=bk, num_stages=st, num_warps=nw) for bn, bk, st, nw in
                             itertools.product((16, 32, 64), (64, 128, 256), (3, 4, 6), (4,))]),
    # the same kernel summing W's tile times x's (swap: wgmma on SM90, W's rows its M)
    "skinny_swap": (skinny_gemm, [dict(block_n=bn, block_k=bk, num_stages=st, num_warps=4, swap=True)
                                  for bn, bk, st in itertools.product((64, 128), (128, 256), (3, 4, 6))]),
    # with split-K and wider rows of W a program (x's tile re-read from L2 per W tile: half W's bytes at 32 rows)
    "skinny_split": (skinny_gemm, [dict(block_n=bn, block_k=bk, num_stages=st, num_warps=4, split_k=sp)
                                   for bn, bk, st, sp in itertools.product((32, 64, 128), (128, 256), (4, 6),
                                                                           (1, 2, 4, 8, 16))]),
    # the corner where bench/results/h100/sk_tuned/G/ found the best configs: 16 to 64 rows, little or no split-K
    "skinny_lean": (skinny_gemm, [dict(block_n=bn, block_k=bk, num_stages=st, num_warps=4, split_k=sp)
                                  for bn, bk, st, sp in itertools.product((16, 32, 64), (128, 256), (4, 6), (1, 2, 4))]),
}
L2 = 50 << 20


def card_table(record: dict, band: float, rows: int = 16) -> dict:
    """kernels/skinny_configs.json's entry for the record's card: {"NxK": config} of the shapes where the skinny GEMM
    beat cuBLAS at `rows` rows by more than `band` (the decode metric's noise band)."""
    return {f"{r['n']}x{r['k']}": r["triton"]["cfg"] for r in record["rows"]
            if r["rows"] == rows and r.get("triton") and r["cublas_ms"] / r["triton"]["ms"] > 1 + band}


def write_table(record_path: Path, band: float, out: Path) -> None:
    """Add (or replace) the record's card in the table file `out`."""
    record = json.loads(record_path.read_text())
    table = json.loads(out.read_text()) if out.exists() else {}
    table[record["device"]] = card_table(record, band)
    table.setdefault("_sources", {})[record["device"]] = f"{record_path} (16 rows, faster than cuBLAS by more than {band:.0%})"
    atomic_write(out, json.dumps(table, indent=1) + "\n")


def write_step_table(records: list[Path], source: str, out: Path) -> None:
    """Replace the records' card's entry in kernels/skinny_step_configs.json (`out`) with each 16-row shape's fastest
    config (later records winning), whatever cuBLAS took: a decode step measured these configs faster (`source` says
    where), and the kernel's table puts its shapes on the skinny GEMM."""
    cards, table = set(), {}
    for path in records:
        record = json.loads(path.read_text())
        cards.add(record["device"])
        table.update({f"{r['n']}x{r['k']}": r["triton"]["cfg"] for r in record["rows"] if r["rows"] == 16 and r.get("triton")})
    if len(cards) != 1:
        raise ValueError(f"--step-table-from needs records of one card, got {sorted(cards)}")
    card = cards.pop()
    step = json.loads(out.read_text()) if out.exists() else {}
    step[card] = table
    step.setdefault("_sources", {})[card] = source
    atomic_write(out, json.dumps(step, indent=1) + "\n")


def _write(out: Path, name: str, rows: list) -> str:
    """The record so far (JSON and a Markdown table) into `out`, atomically: a sweep cut short keeps its shapes."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / f"{name}.json", json.dumps(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                                     rows=rows), indent=1))
    lines = ["| model | rows | projection | N x K | MB | cuBLAS us | GB/s | Triton us | GB/s | speed-up | config | rel err |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        t = r["triton"] or {}
        lines.append(f"| {r['model']} | {r['rows']} | {r['name']} | {r['n']} x {r['k']} | {r['mb']:.1f} | "
                     f"{r['cublas_ms'] * 1e3:.2f} | {r['cublas_gbs']:.0f} | {t.get('ms', float('nan')) * 1e3:.2f} | "
                     f"{r['triton_gbs'] or 0:.0f} | {r['cublas_ms'] / t['ms'] if t else 0:.2f}x | {t.get('cfg')} | "
                     f"{t.get('err', float('nan')):.1e} |")
    text = "\n".join(lines) + "\n"
    atomic_write(out / f"{name}.md", text)
    return text


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the record's folder (timing; the table modes write no record)")
    ap.add_argument("--models", nargs="+", default=["e4b", "31b"], choices=sorted(SHAPES))
    ap.add_argument("--rows", nargs="+", type=int, default=[1])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--kernel", default="gemv", choices=sorted(KERNELS))
    ap.add_argument("--shapes", nargs="+", choices=sorted({s[0] for v in SHAPES.values() for s in v}),
                    help="only these projections (SHAPES' names, e.g. o down)")
    ap.add_argument("--name", default="gemv", help="the output files' stem")
    ap.add_argument("--table-from", type=Path, help="no timing: write this skinny record's card into --table-out")
    ap.add_argument("--table-out", type=Path, default=CARD_CONFIGS)
    ap.add_argument("--band", type=float, default=0.02, help="the noise band a shape must beat cuBLAS by")
    ap.add_argument("--step-table-from", type=Path, nargs="+", metavar="RECORD",
                    help="no timing: these skinny records' fastest configs as their card's step table (--step-table-out)")
    ap.add_argument("--step-source", help="with --step-table-from: the decode-step record that measured them")
    ap.add_argument("--step-table-out", type=Path, default=STEP_CONFIGS)
    o = ap.parse_args(argv)
    if o.step_table_from and not o.step_source:
        ap.error("--step-table-from needs --step-source (the decode-step record that measured the configs)")
    if o.step_table_from or o.table_from:
        try:
            if o.step_table_from:
                write_step_table(o.step_table_from, o.step_source, o.step_table_out)
            else:
                write_table(o.table_from, o.band, o.table_out)
        except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
            print(f"gemv: cannot write the table from {o.step_table_from or o.table_from}: {type(e).__name__}: {e} "
                  f"(a record is kselect.measurement.kernels.gemv's JSON: device, and rows of n, k, rows, triton.cfg)",
                  file=sys.stderr)
            return 2
        return 0
    if o.out is None:
        ap.error("--out is required to time kernels (it names the record's folder)")
    if not torch.cuda.is_available():
        print("gemv: needs a CUDA GPU (it times kernels)", file=sys.stderr)
        return 2
    kernel, configs = KERNELS[o.kernel]
    dev = "cuda"
    rows, text = [], ""
    for model, m in itertools.product(o.models, o.rows):
        shapes = SHAPES[model] if not o.shapes else sorted((s for s in SHAPES[model] if s[0] in o.shapes),
                                                           key=lambda s: o.shapes.index(s[0]))  # in the order given
        for name, n, k in shapes:
            nbytes = n * k * 2
            copies = max(2, min(64, -(-4 * L2 // nbytes)))
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ref = (x.float() @ ws[0].float().T)
            calls = lambda fn: [lambda w=w: fn(x, w) for w in ws]  # noqa: E731 - one graph over every copy
            base = time_graph(calls(F.linear), o.reps)
            best, timed = None, []
            for cfg in configs:
                fn = lambda x, w, cfg=cfg: kernel(x, w, **cfg)  # noqa: E731
                try:
                    err = ((fn(x, ws[0]).float() - ref).abs().max() / ref.abs().max()).item()
                    ms = time_graph(calls(fn), o.reps)
                except Exception as e:  # noqa: BLE001 - a config that does not compile is skipped, and said
                    print(f"{model} {name} {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
                    continue
                timed.append(dict(cfg=cfg, ms=ms))
                if best is None or ms < best["ms"]:
                    best = dict(ms=ms, cfg=cfg, err=err)
            r = dict(kernel=o.kernel, model=model, rows=m, name=name, n=n, k=k, mb=nbytes / 1e6, copies=copies,
                     cublas_ms=base, cublas_gbs=nbytes / base / 1e6, triton=best,
                     triton_gbs=nbytes / best["ms"] / 1e6 if best else None, timed=timed)
            rows.append(r)
            print(json.dumps(r), flush=True)
            text = _write(o.out, o.name, rows)
            del ws
            torch.cuda.empty_cache()
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
