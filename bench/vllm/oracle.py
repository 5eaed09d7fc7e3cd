"""The vLLM oracle: vLLM's own selection code over the cell grid, one JSON record per cell.

Superseded by `kselect oracle` (kselect/oracle/cli.py: warm batched workers, resumable,
byte-identical records); kept as the one-process-per-chunk path the timings compare with
(bench/results/vllm/README.md). It runs in a venv with kselect installed (setup.sh).

    bash bench/vllm/setup.sh                       # once: the wheel, its sources, a venv
    ~/.cache/kselect/vllm/venv-0.33.0/bin/python bench/vllm/oracle.py \
        --src ~/.cache/kselect/vllm/src-0.33.0 --out bench/results/vllm/oracle_0_33_0.jsonl

Cells come from kselect.oracle.cells.grid (filters: --cc 9.0 --model gemma4_31b ...). Each
worker process serves one capability (vLLM caches what it reads from the device), two at a
time (--jobs). See vllm_chain.py for the chain and what is stubbed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))


def _preset(model: str) -> dict:
    from kselect.selector.api import compose_raw

    return compose_raw([f"model={model}", "platform=sm90"])["model"]


def _worker(args: tuple) -> list[dict]:
    src, cc, cells, root = args
    import vllm_chain

    vllm_chain.boot(src, tuple(int(x) for x in cc.split(".")))
    from vllm.engine.arg_utils import EngineArgs

    dirs = {}
    records = []
    for cell in cells:
        if cell["model"] not in dirs:
            dirs[cell["model"]] = vllm_chain.write_model_dirs(_preset(cell["model"]), Path(root))
        target, drafter = dirs[cell["model"]]
        t0 = time.perf_counter()
        try:
            ea = EngineArgs(**vllm_chain.engine_kwargs(cell, target, drafter))
            rec = vllm_chain.run_engine_args(ea)
        except Exception as e:  # EngineArgs itself refused the arguments
            if os.environ.get("KSELECT_ORACLE_DEBUG"):
                traceback.print_exc()
            rec = {"groups": {}, "block_size": None, "selections": [],
                   "error": {"stage": "engine_args", "type": type(e).__name__, "message": str(e)[:2000], "where": ""}}
        rec = {"key": _key(cell), "cell": cell, **rec, "seconds": round(time.perf_counter() - t0, 3)}
        records.append(rec)
    return records


def _key(cell: dict) -> str:
    from kselect.oracle.cells import Cell

    return Cell.from_dict(cell).key


def main(argv=None) -> int:
    from kselect.oracle.cells import BACKEND_PINS, KV_DTYPES, MODELS, PLATFORMS, SPEC, grid

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="vLLM's extracted Python sources (setup.sh prints it)")
    p.add_argument("--out", required=True, help="JSONL to write; cells already in it are kept (resume)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chunk", type=int, default=150, help="cells per worker process (one capability each)")
    p.add_argument("--cc", nargs="*", default=list(PLATFORMS))
    p.add_argument("--model", nargs="*", default=list(MODELS))
    p.add_argument("--kv", nargs="*", default=list(KV_DTYPES))
    p.add_argument("--mm", nargs="*", default=["0", "1"])
    p.add_argument("--fa", nargs="*", default=["-", "3", "4"])
    p.add_argument("--backend", nargs="*", default=list(BACKEND_PINS))
    p.add_argument("--spec", nargs="*", default=list(SPEC))
    p.add_argument("--keys", default=None, help="a file of cell keys: run only these")
    a = p.parse_args(argv)
    cells = grid(ccs=a.cc, models=a.model, kv_dtypes=a.kv, multimodal=[m == "1" for m in a.mm],
                 fa_pins=[None if f == "-" else int(f) for f in a.fa], backends=a.backend, spec=a.spec)
    if a.keys:
        want = set(Path(a.keys).read_text().split())
        cells = [c for c in cells if c.key in want]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if out.exists():
        for line in out.read_text().splitlines(keepends=True):
            if line.strip() and line.endswith("\n"):  # an unterminated last line: a killed append, re-run
                r = json.loads(line)
                done[r["key"]] = line
    todo = [c for c in cells if c.key not in done]
    # every chunk a seeded random sample of one capability, chunks round-robin over capabilities:
    # a run stopped early still covers every axis evenly
    rng = random.Random(0)
    by_cc: dict[str, list[dict]] = {}
    for c in todo:
        by_cc.setdefault(c.cc, []).append(c.to_dict())
    chunks = {cc: [cs[i:i + a.chunk] for i in range(0, len(cs), a.chunk)]
              for cc, cs in ((cc, rng.sample(cs, len(cs))) for cc, cs in by_cc.items())}
    root = tempfile.mkdtemp(prefix="kselect_oracle_models_")
    tasks = []
    for i in range(max((len(v) for v in chunks.values()), default=0)):
        tasks += [(a.src, cc, v[i], root) for cc, v in chunks.items() if i < len(v)]
    t0 = time.perf_counter()
    n = 0
    print(f"{len(cells)} cells, {len(done)} already in {out}, {len(todo)} to run in {len(tasks)} chunks",
          file=sys.stderr, flush=True)
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.jobs, maxtasksperchild=1) as pool, out.open("a") as f:
        for recs in pool.imap_unordered(_worker, tasks):
            for r in recs:
                f.write(json.dumps(r, sort_keys=True) + "\n")
            f.flush()
            n += len(recs)
            print(f"{n}/{len(todo)} cells, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    _sort_in_grid_order(out, cells)
    print(f"{n} cells in {time.perf_counter() - t0:.0f} s -> {out}", file=sys.stderr)
    return 0


def _sort_in_grid_order(out: Path, cells) -> None:
    from kselect.oracle.cells import Cell
    from kselect.selector.base.files import atomic_write

    order = {c.key: i for i, c in enumerate(cells)}
    recs = {}
    for line in out.read_text().splitlines():
        if line.strip():
            recs[json.loads(line)["key"]] = line
    keys = sorted(recs, key=lambda k: (order.get(k, len(order)), k))
    atomic_write(out, "".join(recs[k] + "\n" for k in keys))


if __name__ == "__main__":
    sys.exit(main())
