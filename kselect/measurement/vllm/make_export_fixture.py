"""Pick the export round trip's CI fixture from its records: per model, one command vLLM accepted (the Hopper cell
with KV auto and no pin where there is one), with the cell, kselect's tokens and groups, and vLLM's groups.

    python -m kselect.measurement.vllm.make_export_fixture bench/results/vllm/export_registry_vllm_0_34_0.jsonl.gz \
        bench/results/vllm/export_quantized_vllm_0_34_0.jsonl.gz --out tests/vllm/fixtures/vllm_0_34_0_export_sample.jsonl

tests/vllm/test_export_roundtrip_fixture.py checks that kselect still exports those tokens and groups for each cell
(so vLLM's recorded answer holds for today's export) and that vLLM's groups are kselect's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

GROUP_FIELDS = ("backend", "fa_version", "kernel_block")


def cell_of(key: str) -> dict:
    """The oracle's cell from its key (kselect/oracle/cells.py: Cell.key)."""
    f = dict(part.split("=", 1) for part in key.split("|"))
    return {"cc": f["cc"], "model": f["model"], "kv_cache": f["kv"], "multimodal": f["mm"] == "1",
            "fa": None if f["fa"] == "-" else int(f["fa"]), "backend": f["backend"], "spec": f["spec"]}


def _rank(item: dict) -> tuple:
    c = cell_of(item["cells"][0])
    return (c["cc"] != "9.0", c["kv_cache"] != "auto", c["backend"] != "auto", item["cells"][0])


def pick(items: list[dict]) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for it in items:
        if it["outcome"] == "reproduced":
            by.setdefault(it["model"], []).append(it)
    out = []
    for model in sorted(by):
        it = min(by[model], key=_rank)
        out.append({"cell": cell_of(it["cells"][0]), "tokens": it["tokens"], "kselect": it["kselect"],
                    "vllm": {g: {f: v[f] for f in (*GROUP_FIELDS, "mixed") if f in v}
                             for g, v in it["vllm"]["groups"].items()}})
    return out


def main(argv=None) -> int:
    from kselect.selector.base.files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", nargs="+", help="export_roundtrip.py's OUT.jsonl.gz files")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    items = [json.loads(line) for r in a.records for line in gzip.decompress(Path(r).read_bytes()).decode().splitlines()]
    chosen = pick(items)
    atomic_write(Path(a.out), "".join(json.dumps(c, sort_keys=True) + "\n" for c in chosen))
    print(f"{len(chosen)} commands, one per model -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
