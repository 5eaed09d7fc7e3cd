"""Pick the CI fixture from the oracle's records: every disagreement class of the rules vLLM
0.33.0 differs from (default post_pr52987, the rules the issue measured as `base`), a few cells
each, then a seeded sample over capability x spec-decode x vision mode, 100-200 cells.

    python -m kselect.measurement.vllm.make_fixture bench/results/vllm/oracle_0_33_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_33_0_sample.jsonl --classes-of post_pr52987

--classes-from AGREEMENT.json takes the classes an agree.py run wrote (no re-comparison);
--keys-from FIXTURE keeps an earlier fixture's cells (their records refreshed) before adding.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

KEEP = ("key", "cell", "groups", "error", "block_size")
GROUP_KEEP = ("backend", "fa_version", "kernel_block", "kv_block", "quant_query", "impl", "layers", "mixed")


def main(argv=None) -> int:
    from kselect.oracle.compare import classes, compare, load_records
    from kselect.selector.base.files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records")
    p.add_argument("out")
    p.add_argument("--classes-of", action="append", default=None, help="rules whose disagreement classes to cover")
    p.add_argument("--classes-from", action="append", default=None, help="agree.py's OUT.json: its classes' cells")
    p.add_argument("--keys-from", default=None, help="an earlier fixture: keep its cells")
    p.add_argument("--per-class", type=int, default=3)
    p.add_argument("--total", type=int, default=150)
    a = p.parse_args(argv)
    recs = {r["key"]: r for r in load_records(a.records)}
    rng = random.Random(0)
    chosen: list[str] = []
    if a.keys_from:
        chosen += [k for k in (r["key"] for r in load_records(a.keys_from)) if k in recs]
    class_cells: list[list[str]] = []
    for path in a.classes_from or []:
        class_cells += [sorted(c["cells"]) for c in json.loads(Path(path).read_text())["classes"]]
    for rules in a.classes_of or ([] if a.classes_from or a.keys_from else ["post_pr52987"]):
        class_cells += [sorted({d.key for d in ds}) for _f, _cause, ds in classes(compare(list(recs.values()), rules=rules))]
    for keys in class_cells:
        for k in rng.sample(keys, min(a.per_class, len(keys))):
            if k not in chosen:
                chosen.append(k)
    strata: dict[tuple, list[str]] = {}
    for k, r in recs.items():
        c = r["cell"]
        strata.setdefault((c["cc"], c["spec"], c["multimodal"], bool(r["error"])), []).append(k)
    pool = [sorted(v) for _, v in sorted(strata.items())]
    while len(chosen) < a.total and any(pool):
        for keys in pool:
            rest = [k for k in keys if k not in chosen]
            if rest and len(chosen) < a.total:
                chosen.append(rng.choice(rest))
            keys[:] = rest
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for k in sorted(chosen):
        r = {f: recs[k][f] for f in KEEP}
        if "cache_dtype" in recs[k]:  # the engine's KV-cache dtype (records since #47)
            r["cache_dtype"] = recs[k]["cache_dtype"]
        r["groups"] = {g: {f: v[f] for f in GROUP_KEEP if f in v} for g, v in r["groups"].items()}
        lines.append(json.dumps(r, sort_keys=True))
    atomic_write(out, "\n".join(lines) + "\n")
    print(f"{len(chosen)} cells -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
