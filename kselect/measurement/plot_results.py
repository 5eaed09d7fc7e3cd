"""Roofline plots and a README performance table from the benchmark results.

    python -m kselect.measurement.plot_results --results bench/results/h200 --out plots/h200   # a new or empty folder

Reads every `bench.json` (kselect/measurement/kernels/attention.py: {meta: {gpu, copy_gbs, bf16_gemm_tflops,
...}, rows: [{kind, shape, b, L, path, status, ms, gbs, gbs_graph, tflops, rel_err, ...}]}) and every
`e2e.json` (kselect/measurement/e2e/) under --results, and writes into --out:

  roofline_<shape>.png   per shape family (31b_sliding, 31b_full, e4b_sliding, e4b_full): achieved
                         TFLOP/s vs arithmetic intensity (FLOP per byte of q/k/v/o moved), decode
                         (CUDA-graph GB/s when measured) and prefill points per path, under the
                         measured copy-bandwidth and bf16-GEMM roofs;
  roofline_e2e.png       model decode/prefill vs weight-pass intensity (tokens per weight read);
  performance.md         Markdown tables for the README's performance section.

Missing or malformed files are skipped with a note; without matplotlib only the Markdown is written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from kselect.provenance import CHECKOUT as ROOT
from kselect.selector.base.files import atomic_write

# name: (Hq, Hkv, D, window) -- as kselect.measurement.kernels.attention's SHAPES
SHAPES = {
    "31b_sliding": (32, 16, 256, 1024),
    "31b_full": (32, 4, 512, None),
    "e4b_sliding": (8, 2, 256, 512),
    "e4b_full": (8, 2, 512, None),
}


def load(results: Path) -> tuple[list[dict], list[dict], list[str]]:
    benches, e2es, notes = [], [], []
    if not results.exists():
        return benches, e2es, [f"{results}: does not exist"]
    for name, dest in (("bench.json", benches), ("e2e.json", e2es)):
        for p in sorted(results.rglob(name)):
            try:
                d = json.loads(p.read_text())
                if not isinstance(d, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as e:
                notes.append(f"{p}: skipped ({type(e).__name__}: {e})")
                continue
            d["_source"] = str(p.parent.relative_to(results)) if p.parent != results else "."
            dest.append(d)
    return benches, e2es, notes


# ---------------------------------------------------------------------------- kernel rows
def fp8_path(path: str) -> bool:
    return "fp8" in path


def intensity(row: dict) -> float | None:
    """FLOP per byte for one attention call: decode counts K+V bytes read, prefill q/k/v read + o written."""
    shape = SHAPES.get(row.get("shape"))
    if shape is None:
        return None
    hq, hkv, d, window = shape
    b, L = row.get("b", 1), row.get("L", 1)
    kv_elem = 1 if fp8_path(row.get("path", "")) else 2
    if row.get("kind") == "decode":
        read = min(L, window) if window else L
        flops = 4.0 * b * hq * d * read
        moved = 2 * b * read * hkv * d * kv_elem  # K+V (what kernels.attention's decode GB/s counts)
    else:
        s = L
        pairs = sum(min(i + 1, window) for i in range(s)) if window else s * (s + 1) // 2
        flops = 4.0 * b * hq * d * pairs
        moved = 2 * b * s * hq * d * 2 + 2 * b * s * hkv * d * kv_elem
    return flops / moved


def achieved_tflops(row: dict) -> float | None:
    if row.get("status") != "ok":
        return None
    if row.get("kind") == "prefill":
        return row.get("tflops")
    gbs = row.get("gbs_graph") or row.get("gbs")
    shape = SHAPES.get(row.get("shape"))
    if not gbs or shape is None:
        return None
    hq, hkv, d, window = shape
    kv_elem = 1 if fp8_path(row.get("path", "")) else 2
    # decode GB/s counts K+V bytes; flops per K+V byte = 4*hq*d / (2*hkv*d*elem)
    return gbs * 1e9 * (2.0 * hq / (hkv * kv_elem)) / 1e12


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (kind, shape, b, L): the fastest ok path (graph time for decode when measured)."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        key = (r.get("kind"), r.get("shape"), r.get("b"), r.get("L"))
        t = r.get("ms_graph") or r.get("ms")
        if t is None:
            continue
        if key not in best or t < (best[key].get("ms_graph") or best[key]["ms"]):
            best[key] = r
    return [best[k] for k in sorted(best, key=lambda k: tuple(str(x) for x in k))]


# ---------------------------------------------------------------------------- plots
def plot_kernels(bench: dict, out: Path, tag: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, rows = bench.get("meta", {}), bench.get("rows", [])
    bw, peak = meta.get("copy_gbs"), meta.get("bf16_gemm_tflops")
    written = []
    for shape in SHAPES:
        pts = [(intensity(r), achieved_tflops(r), r) for r in rows if r.get("shape") == shape]
        pts = [(x, y, r) for x, y, r in pts if x and y and x > 0 and y > 0]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(7, 5))
        xs = [x for x, _, _ in pts]
        lo, hi = min(xs + [0.5]) / 2, max(xs + [2000]) * 2
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        if bw:
            ax.plot(grid, [min(bw * x / 1e3, peak or math.inf) for x in grid], "k-", lw=1.5,
                    label=f"roof: copy {bw:,.0f} GB/s" + (f", bf16 GEMM {peak:,.0f} TFLOP/s" if peak else ""))
        elif peak:
            ax.axhline(peak, color="k", lw=1.5, label=f"bf16 GEMM {peak:,.0f} TFLOP/s")
        paths = sorted({r["path"] for _, _, r in pts})
        cmap = plt.get_cmap("tab10")
        for i, path in enumerate(paths):
            for kind, marker in (("decode", "o"), ("prefill", "^")):
                sel = [(x, y) for x, y, r in pts if r["path"] == path and r.get("kind") == kind]
                if sel:
                    ax.scatter(*zip(*sel), marker=marker, color=cmap(i % 10), s=28,
                               label=f"{path} {kind}", alpha=0.85)
        ax.set_title(f"{shape} attention on {meta.get('gpu', '?')} ({tag})")
        p = out / (f"roofline_{shape}.png" if tag == "." else f"roofline_{shape}_{_slug(tag)}.png")
        _write_loglog(fig, ax, "arithmetic intensity (FLOP / byte of q, k, v, o)", "achieved TFLOP/s", 7, p)
        written.append(p)
    return written


def e2e_points(e2e: dict) -> list[tuple[float, float, dict]]:
    """(tokens per weight pass, achieved TFLOP/s on the weights, run) for each measured run."""
    presets = e2e.get("presets", {})
    pts = []
    for r in e2e.get("runs", []) + [dict(h, selection="HF sdpa", kv="auto") for h in e2e.get("hf", [])]:
        p = presets.get(r.get("preset"), {})
        params_read = p.get("decode_read_gb", 0) * 1e9 / 2  # bf16 weights read per pass
        if not params_read:
            continue
        for kind, tok_s, per_pass in (("decode", r.get("decode_tok_s"), r.get("batch", 1)),
                                      ("prefill", r.get("prefill_tok_s"), r.get("batch", 1) * r.get("prompt_len", 1))):
            if tok_s:
                pts.append((float(per_pass), 2 * params_read * tok_s / 1e12, dict(r, kind=kind)))
    return pts


def plot_e2e(e2e: dict, out: Path, tag: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = e2e_points(e2e)
    if not pts:
        return []
    c = e2e.get("ceilings", {})
    bw, peak = c.get("copy_gbs"), c.get("bf16_gemm_tflops")
    fig, ax = plt.subplots(figsize=(7, 5))
    grid = [0.5 * (1e5 / 0.5) ** (i / 200) for i in range(201)]
    if bw:  # one token per weight pass = 1 FLOP/byte in bf16 (2 FLOP per 2-byte weight)
        ax.plot(grid, [min(bw * x / 1e3, peak or math.inf) for x in grid], "k-", lw=1.5,
                label=f"roof: copy {bw:,.0f} GB/s" + (f", bf16 GEMM {peak:,.0f} TFLOP/s" if peak else ""))
    keys = sorted({(r["preset"], r["selection"], r["kv"]) for _, _, r in pts})
    cmap = plt.get_cmap("tab20")
    for i, key in enumerate(keys):
        for kind, marker in (("decode", "o"), ("prefill", "^")):
            sel = [(x, y) for x, y, r in pts if (r["preset"], r["selection"], r["kv"]) == key and r["kind"] == kind]
            if sel:
                ax.scatter(*zip(*sel), marker=marker, color=cmap(i % 20), s=30, label=f"{' '.join(key)} {kind}")
    ax.set_title(f"Gemma-4 end to end on {e2e.get('environment', {}).get('gpu') or 'CPU'} ({tag})")
    p = out / ("roofline_e2e.png" if tag == "." else f"roofline_e2e_{_slug(tag)}.png")
    _write_loglog(fig, ax, "tokens per weight pass (= FLOP/byte of bf16 weights)",
                  "achieved TFLOP/s on the weights (2 x params read x tok/s)", 6, p)
    return [p]


def _write_loglog(fig, ax, xlabel: str, ylabel: str, legend_size: int, path: Path) -> None:
    """Log-log axes with their labels, grid and legend; the figure written to path (atomically) and closed."""
    import matplotlib.pyplot as plt

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size, loc="lower right")
    fig.tight_layout()
    atomic_write(path, _png(fig))
    plt.close(fig)


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s).strip("_") or "results"


# ---------------------------------------------------------------------------- markdown
def _f(x, fmt=",.0f"):
    return "" if x is None else (f"{x:{fmt}}" if isinstance(x, (int, float)) and math.isfinite(x) else str(x))


def markdown(benches: list[dict], e2es: list[dict], notes: list[str], pngs: list[Path], out: Path) -> str:
    L = ["# Performance", ""]
    if not benches and not e2es:
        L += ["No results found (run kselect.measurement.kernels.attention and kselect.measurement.e2e on the GPU).",
              ""]
    for b in benches:
        m = b.get("meta", {})
        L += [f"## Attention kernels ({b['_source']}): {m.get('gpu', '?')}, torch {m.get('torch', '?')}, "
              f"page {m.get('page', '?')}", "",
              f"Ceilings: copy {_f(m.get('copy_gbs'))} GB/s, bf16 GEMM {_f(m.get('bf16_gemm_tflops'))} TFLOP/s. "
              "Fastest correct-status path per shape; decode = CUDA-graph replay when measured.", "",
              "| kind | shape | B | L | best path | ms | TFLOP/s | GB/s | % copy | rel err | paths failed |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        rows = b.get("rows", [])
        for r in best_rows(rows):
            failed = sorted({x["path"] for x in rows if x.get("status") == "FAIL" and
                             (x.get("kind"), x.get("shape"), x.get("b"), x.get("L")) ==
                             (r.get("kind"), r.get("shape"), r.get("b"), r.get("L"))})
            gbs = r.get("gbs_graph") or r.get("gbs")
            pct = r.get("pct_copy") or (round(100 * gbs / m["copy_gbs"], 1) if gbs and m.get("copy_gbs") else None)
            L.append(f"| {r['kind']} | {r['shape']} | {r['b']} | {r['L']} | {r['path']} | "
                     f"{_f(r.get('ms_graph') or r.get('ms'), '.4f')} | {_f(achieved_tflops(r), '.1f')} | {_f(gbs)} | "
                     f"{_f(pct, '.1f')} | {r.get('rel_err', '')} | {', '.join(failed)} |")
        L.append("")
    for e in e2es:
        env = e.get("environment", {})
        hf = {(h.get("preset"), h.get("batch")): h for h in e.get("hf", [])}
        verdict = {(s.get("preset"), s.get("selection"), s.get("kv")): (s.get("numerics") or {}).get("verdict", "")
                   for s in e.get("selections", [])}
        L += [f"## Gemma-4 end to end ({e['_source']}): {env.get('gpu') or 'CPU'}, commit "
              f"`{str(env.get('git_commit', ''))[:12]}`", "",
              "| preset | selection | kv | batch | prefill tok/s | decode tok/s | HF decode tok/s | vs HF | numerics |",
              "|---|---|---|---|---|---|---|---|---|"]
        for r in e.get("runs", []):
            h = hf.get((r.get("preset"), r.get("batch")), {})
            ratio = (f"{r['decode_tok_s'] / h['decode_tok_s']:.1f}x"
                     if r.get("decode_tok_s") and h.get("decode_tok_s") else "")
            v = verdict.get((r.get("preset"), r.get("selection"), r.get("kv")), "")
            L.append(f"| {r.get('preset')} | {r.get('selection')} | {r.get('kv')} | {r.get('batch')} | "
                     f"{_f(r.get('prefill_tok_s'))} | {_f(r.get('decode_tok_s'), ',.1f')} | "
                     f"{_f(h.get('decode_tok_s'), ',.1f')} | {ratio} | {'**WRONG**' if v == 'WRONG' else v} |"
                     + (f" {r['error']}" if r.get("error") else ""))
        L.append("")
    if pngs:
        L += ["Plots: " + ", ".join(f"[{p.name}]({p.relative_to(out).as_posix()})" for p in pngs), ""]
    if notes:
        L += ["Notes: " + "; ".join(notes), ""]
    return "\n".join(L)


def _png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--out", type=Path, required=True, help="a new or empty folder (never the committed plots)")
    opts = ap.parse_args(argv)
    out = opts.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        from kselect.selector.base.errors import KSelectError  # noqa: PLC0415

        raise KSelectError(f"--out {out}: {'not a folder' if not out.is_dir() else 'holds files already'}; allowed: a "
                           "new or empty folder (the plots are written there, never over earlier or committed ones)")
    out.mkdir(parents=True, exist_ok=True)
    benches, e2es, notes = load(opts.results)
    pngs: list[Path] = []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        notes.append("matplotlib is not installed: no PNGs")
    else:
        for b in benches:
            pngs += plot_kernels(b, out, b["_source"])
        for e in e2es:
            pngs += plot_e2e(e, out, e["_source"])
    md = markdown(benches, e2es, notes, pngs, out)
    atomic_write((out / "performance.md"), md)
    print(md)
    print(f"wrote {out / 'performance.md'} and {len(pngs)} PNG(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from kselect.selector.base.cli_errors import run_cli

    run_cli(main)  # every error: exit 2, one paragraph (--debug: traceback)
