"""Nsight Compute on E4B's decode attention and its merge (issue #52, bench/results/h100/attn_qkv/ncu/).

Each layer kind's attention (kernels/triton_paged.py, the small launch) and its merge at --batch sequences of 520
keys (probes/attn_floor.py's inputs at batch 1), launched as the step launches them (PDL where gemma4/fused.py
pdl_max_tokens says, with the card's rules), profiled by `ncu --set full` with the clocks left
alone. Under the profiler each kernel runs alone, so its duration includes the launch and drain PDL hides.

    python3 -m kselect.measurement.probes.attn_ncu --out $OUT/N [--batch 16]

Writes --out/metrics.txt (each kernel's duration, cycles, instructions, occupancy and stall reasons) and
sass_<kind>.csv (the attention's SASS instructions: executions and stall samples; sass_<kind>_b<batch>.csv past
batch 1), atomically. Exits 2 with one line where there is no CUDA device or no `ncu`. `--run KIND` is the program
ncu profiles.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "kselect.measurement.probes.attn_ncu"  # what ncu runs (`-m`; __name__ is "__main__" there)
KINDS = ("sliding", "full")
KERNELS = "_attn_fwd|_merge_splits"
METRICS = ("SM Frequency", "Elapsed Cycles", "Duration", "SM Active Cycles", "DRAM Throughput", "Executed Ipc Active",
           "L2 Hit Rate", "Active Warps Per Scheduler", "Eligible Warps Per Scheduler",
           "Warp Cycles Per Issued Instruction", "Executed Instructions", "Grid Size", "Block Size",
           "Registers Per Thread", "Dynamic Shared Memory Per Block", "Achieved Occupancy")
SASS_COLUMNS = ("Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
                "Instructions Executed")
_ROW = re.compile(r"^\s+(.+?)\s{2,}(\S+\s+)?([\d,.]+)\s*$")  # name, unit, value of a details line


def run(kind: str, batch: int = 1, calls: int = 12) -> None:
    """The profiled program: `calls` attention calls (and merges) of one layer kind at `batch` sequences, under PDL
    where a step of `batch` tokens launches with it on this card (gemma4/fused.py pdl_max_tokens)."""
    import torch

    from kselect.gemma4.fused import pdl_max_tokens
    from kselect.kernels import pdl
    from kselect.measurement.kernel_timing import make_inputs
    from kselect.measurement.probes import attn_floor as A

    c = A.CASES[kind]
    sets = [make_inputs(A.HQ, A.HKV, c["d"], c["window"], batch, A.KV_LEN, 1, 16, False, "cuda") for _ in range(8)]
    with pdl.on() if batch <= pdl_max_tokens(torch.device("cuda")) else pdl.off():
        for i in range(calls):
            A.call(sets[i % len(sets)])
    torch.cuda.synchronize()


def metrics(details: str, kind: str) -> list[str]:
    """The first launch of each kernel in ncu's details page: METRICS and every stall reason, a line each."""
    out, seen = [], set()
    sections = re.split(r"(?m)^(?=  _\w+ \()", details)
    for sec in sections:
        head = sec.splitlines()[0].strip() if sec.strip() else ""
        name = head.split(" ")[0]
        if not re.fullmatch(KERNELS, name) or name in seen:
            continue
        seen.add(name)
        out.append(f"## {kind}: {head}")
        got = set()
        for line in sec.splitlines()[1:]:
            m = _ROW.match(line)
            key = m.group(1).strip() if m else ""
            if m and (key in METRICS or key.startswith("Stall ")) and key not in got:
                got.add(key)
                out.append(f"    {key:45s} {(m.group(2) or '').strip():16s} {m.group(3)}")
        out.append("")
    return out


def sass_table(source_csv: str) -> str:
    """ncu's source page (CSV, SASS) cut to SASS_COLUMNS, an index first."""
    rows = list(csv.reader(io.StringIO(source_csv)))
    head = next(i for i, r in enumerate(rows) if "Source" in r)
    ix = [rows[head].index(c) for c in SASS_COLUMNS]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("index",) + SASS_COLUMNS)
    for k, r in enumerate(rows[head + 1:]):
        w.writerow([k] + [r[i].strip() for i in ix])
    return buf.getvalue()


def profile(ncu: str, kind: str, batch: int, tmp: Path) -> tuple[list[str], str]:
    rep = tmp / kind
    subprocess.run([ncu, "--clock-control", "none", "--kernel-name", f"regex:{KERNELS}", "--launch-skip", "8",
                    "--launch-count", "2", "--set", "full", "--import-source", "no", "-f", "-o", str(rep),
                    sys.executable, "-m", MODULE, "--run", kind, "--batch", str(batch)], check=True,
                   capture_output=True, text=True)
    page = [ncu, "--import", f"{rep}.ncu-rep", "--page"]
    details = subprocess.run(page + ["details", "--print-details", "all"], check=True, capture_output=True,
                             text=True).stdout
    source = subprocess.run(page + ["source", "--print-source", "sass", "--csv", "--kernel-name", "_attn_fwd",
                                    "--launch-count", "1"], check=True, capture_output=True, text=True).stdout
    return metrics(details, kind if batch == 1 else f"{kind}, batch {batch}"), sass_table(source)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for metrics.txt and sass_<kind>.csv")
    ap.add_argument("--batch", type=int, default=1, choices=range(1, 17), metavar="1..16",
                    help="sequences a call (default 1)")
    ap.add_argument("--run", choices=KINDS, help="(what ncu runs) one layer kind's calls, nothing written")
    a = ap.parse_args(argv)
    if a.run:
        run(a.run, a.batch)
        return 0
    if a.out is None:
        ap.error("--out is required")
    import torch

    ncu = shutil.which("ncu")
    if not torch.cuda.is_available() or ncu is None:
        print("attn_ncu: needs a CUDA device and Nsight Compute's `ncu` on the PATH", file=sys.stderr)
        return 2
    from kselect.measurement.e2e.environment import environment
    from kselect.selector.base.files import atomic_write

    env = environment(sys.argv[1:] if argv is None else argv, script=f"-m {MODULE}")
    lines = [f"# Nsight Compute: E4B's decode attention and merge at batch {a.batch}, {torch.cuda.get_device_name()}",
             "", f"`{env['command']}` at `{env['git_commit']}`", ""]
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            try:
                got, sass = profile(ncu, kind, a.batch, Path(tmp))
            except subprocess.CalledProcessError as e:
                tail = " | ".join((e.stderr or e.stdout or "").strip().splitlines()[-3:])
                print(f"attn_ncu: ncu failed on the {kind} layer (exit {e.returncode}): {tail}", file=sys.stderr)
                return 2
            lines += got
            atomic_write(a.out / (f"sass_{kind}.csv" if a.batch == 1 else f"sass_{kind}_b{a.batch}.csv"), sass)
    atomic_write(a.out / "metrics.txt", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
