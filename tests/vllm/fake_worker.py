"""A stand-in for the oracle's worker in CI (no vLLM): kselect/oracle/worker.py's own protocol
loop (`serve`), loaded by file path as the release's python loads it, with a fake chain.

Records come from FAKE_ORACLE_TRUTH (a JSON file {key: record}) where it names the cell, else
from a hash of the key. FAKE_ORACLE_RAN appends each cell it runs to a file; FAKE_ORACLE_JITTER sleeps a key-dependent while
per cell (finishing order then differs from submission order). FAKE_ORACLE_CRASH=N: the process
exits hard before its N-th cell."""

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

WORKER = Path(__file__).resolve().parents[2] / "kselect" / "oracle" / "worker.py"


def _serve():
    spec = importlib.util.spec_from_file_location("oracle_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.serve


def fake_record(key: str, cc: str) -> dict:
    h = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    if h % 5 == 0:
        return {"groups": {}, "block_size": None, "selections": [],
                "error": {"stage": "selection", "type": "ValueError", "message": f"fake refusal {h % 7}", "where": ""}}
    g = {"backend": ["FLASH_ATTN", "TRITON_ATTN", "FLASHINFER"][h % 3], "fa_version": h % 2 + 3,
         "kernel_block": 16 << (h % 4), "kv_block": 16 << (h % 4), "quant_query": bool(h % 2), "layers": [0, 1]}
    return {"groups": {"sliding_window": g, "full_attention": dict(g, layers=[5])}, "block_size": 16,
            "selections": [{"cc": cc}], "error": None}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--src")
    p.add_argument("--cc", required=True)
    p.add_argument("--version", default="")
    p.add_argument("--models-root")
    p.add_argument("--result-fd", type=int, required=True)
    a = p.parse_args()
    out = os.fdopen(a.result_fd, "w")
    truth = json.loads(Path(os.environ["FAKE_ORACLE_TRUTH"]).read_text()) if os.environ.get("FAKE_ORACLE_TRUTH") else {}
    ran = os.environ.get("FAKE_ORACLE_RAN")
    crash = int(os.environ.get("FAKE_ORACLE_CRASH", "0"))
    count = [0]

    def run_cell(item):
        assert item["cell"]["cc"] == a.cc, "a batch of another capability reached this worker"
        assert Path(item["target"], "config.json").is_file(), "model folder not written"
        count[0] += 1
        if crash and count[0] >= crash:
            os._exit(3)
        if ran:
            with open(ran, "a") as f:
                f.write(item["key"] + "\n")
        if os.environ.get("FAKE_ORACLE_JITTER"):
            time.sleep(int(hashlib.sha1(item["key"].encode()).hexdigest(), 16) % 7 / 500)
        rec = truth.get(item["key"]) or fake_record(item["key"], a.cc)
        return {**{k: v for k, v in rec.items() if k not in ("key", "cell")}, "vllm_version": a.version}

    return _serve()(run_cell, sys.stdin, out, a.models_root)


if __name__ == "__main__":
    sys.exit(main())
