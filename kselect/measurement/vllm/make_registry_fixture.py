"""Pick the registry grid's CI fixture from the oracle's record: per architecture, its auto cells
on SM80 and SM100 and a few cells with an FP8 cache or a backend pin (where vLLM selects and where it refuses), with the
configs of the architectures picked.

    python -m kselect.measurement.vllm.make_registry_fixture bench/results/vllm/oracle_registry_0_34_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_34_0_registry_sample.jsonl
    python -m kselect.measurement.vllm.make_registry_fixture bench/results/vllm/oracle_wrappers_0_34_0.jsonl.gz \
        tests/vllm/fixtures/vllm_0_34_0_wrappers_sample.jsonl --per-arch 10 --auto-cc 8.0 9.0 10.0
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

KEEP = ("key", "cell", "groups", "error", "block_size")
GROUP_KEEP = ("backend", "fa_version", "kernel_block", "kv_block", "quant_query", "impl", "layers", "mixed",
              "mamba_type", "page_size_bytes", "sparse")


def pick(records: list[dict], per_arch: int, seed: int = 0, auto_ccs=("8.0", "10.0")) -> list[dict]:
    rng = random.Random(seed)
    by: dict[str, list[dict]] = {}
    for r in records:
        by.setdefault(r["cell"]["model"], []).append(r)
    out = []
    for arch in sorted(by):
        rs = by[arch]
        auto = [r for r in rs if r["cell"]["backend"] == "auto" and r["cell"]["kv_cache"] == "auto"
                and r["cell"]["cc"] in auto_ccs]
        rest = [r for r in rs if r not in auto]
        fails = [r for r in rest if r["error"]]
        sel = [r for r in rest if not r["error"]]
        chosen = auto + rng.sample(fails, min(len(fails), 1)) + rng.sample(sel, min(len(sel), 1))
        left = [r for r in rest if r not in chosen]
        chosen += rng.sample(left, max(0, min(len(left), per_arch - len(chosen))))
        out += sorted(chosen, key=lambda r: r["key"])
    return out


def trim(r: dict) -> dict:
    out = {k: r[k] for k in KEEP if k in r}
    out["groups"] = {g: {k: v for k, v in d.items() if k in GROUP_KEEP} for g, d in r["groups"].items()}
    if r.get("error"):
        out["error"] = {k: r["error"][k] for k in ("stage", "type", "message", "where")}
    return out


def main(argv=None) -> int:
    from kselect.oracle.compare import load_records
    from kselect.oracle.registry import configs_path, load_configs
    from kselect.selector.base.files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records")
    p.add_argument("out")
    p.add_argument("--per-arch", type=int, default=4)
    p.add_argument("--auto-cc", nargs="+", default=["8.0", "10.0"], help="capabilities whose auto cells are all kept "
                                                                         "(default 8.0 10.0)")
    a = p.parse_args(argv)
    chosen = pick(load_records(a.records), a.per_arch, auto_ccs=tuple(a.auto_cc))
    atomic_write(Path(a.out), "".join(json.dumps(trim(r), sort_keys=True) + "\n" for r in chosen))
    configs = load_configs(configs_path(Path(a.records)))
    archs = sorted({r["cell"]["model"] for r in chosen})
    keep = {**configs, "configs": {k: configs["configs"][k] for k in archs}}
    atomic_write(configs_path(Path(a.out)), json.dumps(keep, indent=1, sort_keys=True) + "\n")
    print(f"{len(chosen)} cells of {len(archs)} architectures -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
