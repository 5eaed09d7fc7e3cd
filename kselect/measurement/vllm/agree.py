"""Agreement of kselect with the vLLM oracle, per field, with every disagreement by cause.

    python -m kselect.measurement.vllm.agree bench/results/vllm/oracle_0_33_0.jsonl.gz --rules base \
        --out bench/results/vllm/agreement_base

Runs in the project's env (kselect's selector; no torch, no vLLM). Writes OUT.md (the table and
the disagreement classes, with the command, the commit and the versions) and OUT.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "conf", "selector"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + (" (conf/selector modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    from kselect.oracle.compare import compare, load_records, render, to_json
    from kselect.selector.base.files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", help="the oracle's JSONL (.gz)")
    p.add_argument("--rules", default=None, help="kselect's rules= option (default: the config's)")
    p.add_argument("--out", default=None, help="write OUT.md and OUT.json")
    p.add_argument("--limit", type=int, default=None, help="print at most this many disagreement classes")
    a = p.parse_args(argv)
    path = Path(a.records)
    if not path.is_file():
        print(f"agree: records file {path} does not exist (`kselect oracle` writes it)", file=sys.stderr)
        return 2
    records = load_records(path)
    rep = compare(records, rules=a.rules)
    versions = sorted({r.get("vllm_version", "0.33.0") for r in records})
    head = (f"Command: `python -m kselect.measurement.vllm.agree {path.as_posix()} --rules {a.rules}`  \n"
            f"kselect commit: {_commit()}; vLLM {', '.join(versions)} (oracle: kselect oracle)\n")
    text = render(rep, a.limit)
    print(text)
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        for suffix, body in ((".md", head + "\n" + render(rep)), (".json", json.dumps(
                {"command": head.splitlines()[0], "commit": _commit(), **to_json(rep)}, indent=1))):
            atomic_write(out.with_name(out.name + suffix), body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
