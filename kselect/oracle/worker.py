"""The oracle's worker: one process in a vLLM release's own venv, vLLM imported once and kept warm.

    <venv>/bin/python kselect/oracle/worker.py --src SRC --cc 9.0 --result-fd N < batches

kselect/oracle/run.py starts it (never imports vLLM itself). It reads batches, one JSON line each
({"id", "cells": [{"key", "cell", "target", "drafter"}]}) on stdin, runs vLLM's chain per cell
(vllm_chain.py beside this file) and answers one JSON line per batch ({"id", "records",
"seconds"}) on fd N; vLLM's own prints go to stderr. Standard library and vLLM only: the file is
run as a script, so no kselect module is imported here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def serve(run_cell, inp, out, models_root: str | None = None) -> int:
    """The protocol loop, shared with the tests' fake worker: a batch in, its records out."""
    for line in inp:
        if not line.strip():
            continue
        batch = json.loads(line)
        t0 = time.perf_counter()
        records = []
        for item in batch["cells"]:
            rec = run_cell(item)
            rec = {"key": item["key"], "cell": item["cell"], **rec}
            if models_root:  # the run's temp folder is not part of what vLLM decided
                rec = json.loads(json.dumps(rec).replace(models_root, "<models>"))
            records.append(rec)
        out.write(json.dumps({"id": batch["id"], "records": records,
                              "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
        out.flush()
    return 0


def _load_chain():
    spec = importlib.util.spec_from_file_location("kselect_vllm_chain", HERE / "vllm_chain.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="the release's Python sources (a folder holding vllm/)")
    p.add_argument("--cc", required=True, help="the GPU capability this process mocks, e.g. 9.0")
    p.add_argument("--version", default="", help="the release, written into each record")
    p.add_argument("--models-root", default=None, help="the model folders' root, replaced by <models> in records")
    p.add_argument("--result-fd", type=int, required=True)
    a = p.parse_args(argv)
    out = os.fdopen(a.result_fd, "w")
    os.dup2(2, 1)  # anything vLLM prints goes to the log, never into the answers
    sys.path[:] = [x for x in sys.path if Path(x or ".").resolve() != HERE]  # this folder's modules are kselect's
    chain = _load_chain()
    chain.boot(a.src, tuple(int(x) for x in a.cc.split(".")))
    from vllm.engine.arg_utils import EngineArgs

    def run_cell(item: dict) -> dict:
        try:
            ea = EngineArgs(**chain.engine_kwargs(item["cell"], Path(item["target"]),
                                                  Path(item["drafter"]) if item.get("drafter") else None))
        except Exception as e:  # EngineArgs itself refused the arguments
            if os.environ.get("KSELECT_ORACLE_DEBUG"):
                traceback.print_exc()
            rec = {"groups": {}, "block_size": None, "selections": [],
                   "error": {"stage": "engine_args", "type": type(e).__name__, "message": str(e)[:2000],
                             "where": ""}}
        else:
            rec = chain.run_engine_args(ea)
        return {**rec, "vllm_version": a.version}

    return serve(run_cell, sys.stdin, out, a.models_root)


if __name__ == "__main__":
    sys.exit(main())
