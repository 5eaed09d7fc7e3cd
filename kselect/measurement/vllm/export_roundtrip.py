"""Export round trip: every cell kselect selects, its `output=vllm` command parsed by vLLM's own
`vllm serve` argument parser and run through the same chain as the oracle.

    <python with vLLM's deps and kselect> -m kselect.measurement.vllm.export_roundtrip \
        --src ~/.cache/kselect/vllm/src-0.34.0 --rules vllm_0_34_0 --grid registry \
        --configs bench/results/vllm/oracle_registry_0_34_0.configs.json --out bench/results/vllm/export_registry_vllm_0_34_0

Per cell: accepted (the parser, EngineArgs and the chain ran) and reproduced (each group's
backend, FA version and kernel block equal kselect's), accepted but different, or refused (by
the parser, the engine config, layer init, ...; the reason recorded). The model folder stands
for `<model>`; a drafter named in --speculative-config stands for the preset's assistant
folder; `--skip-tokenizer-init --load-format dummy` are added (no tokenizer, no weights here).
Cells whose commands are identical on one capability run once. Commands run architecture by
architecture in turn (each architecture's first command on every capability, then its second, ...), so a run
stopped early has covered every architecture alike; each finished chunk is kept in OUT.parts.jsonl and a re-run
resumes from it. Writes OUT.md (per outcome, per reason and per model) and OUT.jsonl.gz.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import multiprocessing as mp
import re
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


FIELDS = ("backend", "fa_version", "kernel_block")


def _run_command(tokens: list[str], target: Path, drafter: Path | None) -> tuple[dict, dict]:
    """(vLLM's result in the oracle's record shape, notes on what was substituted)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from kselect.oracle import vllm_chain

    notes = {}
    argv = list(tokens)
    assert argv[:2] == ["vllm", "serve"], argv[:3]
    argv = ["serve", str(target), *argv[3:]]  # the model the export names (a repository, '<model>'): the local copy
    for i, a in enumerate(argv):
        if a == "--speculative-config" and i + 1 < len(argv):
            spec = json.loads(argv[i + 1])
            if "model" in spec:
                notes["drafter_named"] = spec["model"]
                spec["model"] = str(drafter)
                argv[i + 1] = json.dumps(spec)
    argv += ["--skip-tokenizer-init", "--load-format", "dummy"]
    # `vllm serve`'s parser as ServeSubcommand.subparser_init builds it (without importing the
    # API server that module starts)
    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="subparser")
    make_arg_parser(sub.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
        args.model = args.model_tag or args.model
        validate_parsed_serve_args(args)
        engine_args = AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        msg = " ".join(err.getvalue().split())[-400:]
        return {"groups": {}, "error": {"stage": "parser", "type": "SystemExit", "message": msg}}, notes
    except Exception as e:  # noqa: BLE001 - recorded
        return {"groups": {}, "error": {"stage": "parser", "type": type(e).__name__, "message": str(e)[:400]}}, notes
    return vllm_chain.run_engine_args(engine_args), notes


def _worker(task) -> list[dict]:
    src, cc, items, root, configs = task
    from kselect.oracle import vllm_chain

    vllm_chain.boot(src, tuple(int(x) for x in cc.split(".")))
    from kselect.oracle.models import preset as _preset, write_model_dirs
    from kselect.oracle.registry import write_model_dirs as registry_dirs

    dirs, out = {}, []
    for item in items:
        if item["model"] not in dirs and configs and item["model"] in configs:  # a registry-grid architecture
            dirs[item["model"]] = registry_dirs(configs, Path(root), [item["model"]])[item["model"]]
        if item["model"] not in dirs:
            dirs[item["model"]] = write_model_dirs(_preset(item["model"]), Path(root))
        target, drafter = dirs[item["model"]]
        res, notes = _run_command(item["tokens"], target, drafter)
        out.append({**item, "vllm": {"groups": res["groups"], "error": res["error"]}, "notes": notes})
    return out


def _outcome(item: dict) -> tuple[str, str]:
    """('reproduced' | 'different' | 'refused', detail)."""
    from kselect.oracle.compare import same_field

    v = item["vllm"]
    if v["error"]:
        e = v["error"]
        msg = re.sub(r"/\S+", "<path>", e["message"])
        msg = re.sub(r"\{.*\}", "{…}", msg)[:200]
        return "refused", f"{e['stage']}: {e['type']}: {msg}"
    diffs = []
    for g, kg in sorted(item["kselect"].items()):
        vg = v["groups"].get(g)
        if vg is None:
            diffs.append(f"{g}: no such group in vLLM")
            continue
        diffs += [f"{g}.{f}: kselect {kg[f]!r} vLLM {vg[f]!r}" for f in FIELDS if not same_field(f, vg, kg)]
    extra = sorted(set(v["groups"]) - set(item["kselect"]))
    diffs += [f"{g}: vLLM has it, kselect does not" for g in extra]
    return ("different", "; ".join(diffs)) if diffs else ("reproduced", "")


def _interleaved(by_cc: dict[str, list[dict]], chunk: int) -> list[tuple[str, list[dict]]]:
    """Chunks of one capability each: within a capability the models take turns (every model's first command, then
    every model's second, ...), and the capabilities' chunks alternate, so any prefix of the run covers every model
    on every capability alike."""
    chunks_by_cc = {}
    for cc, items in by_cc.items():
        rank: Counter = Counter()
        keyed = []
        for item in items:  # grid order within a model
            keyed.append(((rank[item["model"]], item["model"]), item))
            rank[item["model"]] += 1
        ordered = [item for _, item in sorted(keyed, key=lambda t: t[0])]
        chunks_by_cc[cc] = [ordered[i:i + chunk] for i in range(0, len(ordered), chunk)]
    out = []
    for i in range(max((len(c) for c in chunks_by_cc.values()), default=0)):
        out += [(cc, cs[i]) for cc, cs in chunks_by_cc.items() if i < len(cs)]
    return out


def _item_key(item: dict) -> str:
    return json.dumps([item["cc"], item["model"], item["tokens"]])


def _per_model(results: list[dict]) -> list[str]:
    """The Markdown table of outcomes per model (cells)."""
    per: dict[str, Counter] = {}
    for item in results:
        per.setdefault(item["model"], Counter())[item["outcome"]] += len(item["cells"])
    lines = ["", "## By model", "", "| model | reproduced | different | refused by vLLM |", "|---|---:|---:|---:|"]
    lines += [f"| {m} | {c['reproduced']} | {c['different']} | {c['refused']} |" for m, c in sorted(per.items())]
    return lines


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--rules", default=None)
    p.add_argument("--out", required=True, help="writes OUT.md and OUT.jsonl.gz (OUT.parts.jsonl while it runs)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chunk", type=int, default=150, help="commands per worker process (each boots vLLM once)")
    p.add_argument("--grid", choices=("gemma4", "models", "registry"), default="gemma4",
                   help="the oracle grid whose cells are exported (kselect/oracle/cells.py: grid or models_grid; "
                        "registry: kselect/oracle/registry.py, its configs from --configs)")
    p.add_argument("--configs", default=None, help="--grid registry: the record's .configs.json")
    p.add_argument("--cc", nargs="*", default=None)
    p.add_argument("--model", nargs="*", default=None, help="only these models (presets or registry architectures)")
    p.add_argument("--limit", type=int, default=None, help="run a seeded sample of this many distinct commands")
    p.add_argument("--cells-from", default=None, help="only cells present in this oracle JSONL (.gz)")
    return p.parse_args(argv)


def _cells(a: argparse.Namespace) -> tuple[list, dict | None]:
    """The grid's cells the options keep, and the registry's configs (None for the preset grids)."""
    from kselect.oracle.cells import grid, models_grid

    configs = None
    if a.grid == "registry":
        from kselect.oracle.registry import load_configs, registry_grid

        configs = load_configs(Path(a.configs))["configs"]
        every = registry_grid(configs)
    else:
        every = models_grid() if a.grid == "models" else grid()
    cells = [c for c in every if (a.cc is None or c.cc in a.cc) and (a.model is None or c.model in a.model)]
    if a.cells_from:
        from kselect.oracle.compare import load_records

        have = {r["key"] for r in load_records(a.cells_from)}
        cells = [c for c in cells if c.key in have]
    return cells, configs


def _distinct(cells, exports: dict, limit: int | None) -> tuple[dict, dict[str, list[str]]]:
    """({(cc, model, tokens): the command's item with its cells}, {kselect's refusal: its cells}): one run per
    distinct command on a capability; --limit keeps a seeded sample."""
    from kselect.oracle.export import command_tokens

    uniq: dict[tuple, dict] = {}
    refused: dict[str, list[str]] = {}
    for c in cells:
        e = exports.get(c.key)
        if e is None:
            continue
        if e["command"] is None:
            refused.setdefault(re.sub(r"'[^']*'", "'…'", e["refused"])[:300], []).append(c.key)
            continue
        toks = command_tokens(e["command"])
        k = (c.cc, c.model, tuple(toks))
        if k not in uniq:
            uniq[k] = {"cc": c.cc, "model": c.model, "tokens": toks, "command": e["command"], "kselect": e["groups"],
                       "cells": []}
        uniq[k]["cells"].append(c.key)
    if limit is not None and limit < len(uniq):
        import random

        keep = set(random.Random(0).sample(sorted(uniq), limit))
        uniq = {k: v for k, v in uniq.items() if k in keep}
    return uniq, refused


def _resumed(parts: Path) -> dict[str, dict]:
    """The results a stopped run kept in OUT.parts.jsonl, by item."""
    done = {}
    if parts.is_file():
        for line in parts.read_text().splitlines():
            with contextlib.suppress(ValueError):
                r = json.loads(line)
                done[_item_key(r)] = r
    return done


def _run(a: argparse.Namespace, uniq: dict, configs, parts: Path, t0: float) -> list[dict]:
    """Every distinct command's result: those kept from a stopped run, the rest run in chunks of worker processes
    (each finished chunk appended to `parts`)."""
    done = _resumed(parts)
    by_cc: dict[str, list[dict]] = {}
    for k, item in uniq.items():
        if _item_key(item) not in done:
            by_cc.setdefault(k[0], []).append(item)
    root = tempfile.mkdtemp(prefix="kselect_export_models_")
    tasks = [(a.src, cc, items, root, configs) for cc, items in _interleaved(by_cc, a.chunk)]
    print(f"{len(uniq)} distinct commands ({len(done)} done before) in {len(tasks)} chunks", file=sys.stderr,
          flush=True)
    wanted = {_item_key(it) for it in uniq.values()}
    results = [r for k, r in done.items() if k in wanted]
    with mp.get_context("spawn").Pool(a.jobs, maxtasksperchild=1) as pool, open(parts, "a") as kept:
        for rs in pool.imap_unordered(_worker, tasks):
            results += rs
            kept.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rs))
            kept.flush()
            print(f"{len(results)}/{len(uniq)} commands, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    results.sort(key=lambda r: (r["cells"][0]))
    return results


def _report(a: argparse.Namespace, counts: tuple[int, int, int], results: list[dict],
            export_refused: dict[str, list[str]], t0: float) -> list[str]:
    """OUT.md's lines; each result gets its outcome and detail. counts: (cells kselect selected, cells, commands)."""
    from kselect.provenance import project_commit

    per_cell = Counter()
    reasons: dict[tuple[str, str], list[str]] = {}
    for item in results:
        outcome, detail = _outcome(item)
        item["outcome"], item["detail"] = outcome, detail
        per_cell[outcome] += len(item["cells"])
        reasons.setdefault((outcome, detail), []).extend(item["cells"])
    n_selected, n_cells, n_commands = counts
    ver = re.search(r"__version__ = version = '([^']+)'", (Path(a.src) / "vllm" / "_version.py").read_text())
    argv_text = shlex.join(sys.argv[1:]).replace(str(Path.home()), "~")
    lines = [f"Command: `python -m kselect.measurement.vllm.export_roundtrip {argv_text}` (vLLM {ver[1] if ver else '?'}'s `vllm serve` parser, "
             f"EngineArgs and chain; kselect/oracle/vllm_chain.py)  ", f"kselect commit: {project_commit()['commit']}; "
             f"{time.perf_counter() - t0:.0f} s", "",
             f"{n_selected} of {n_cells} cells selected by kselect; {n_commands} distinct commands run "
             f"(the counts below are cells: each cell counts with its command's outcome).", "",
             "| outcome | cells |", "|---|---:|"]
    n_exp_ref = sum(len(v) for v in export_refused.values())
    lines += [f"| accepted, reproduced | {per_cell['reproduced']} |", f"| accepted, different | {per_cell['different']} |",
              f"| refused by vLLM | {per_cell['refused']} |", f"| export refused by kselect (one line, no command) | {n_exp_ref} |",
              "", "## By reason", ""]
    for (outcome, detail), ks in sorted(reasons.items(), key=lambda t: (t[0][0] != "reproduced", -len(t[1]))):
        lines.append(f"- **{outcome}** ({len(ks)} cells){': ' + detail if detail else ''}  \n  e.g. `{ks[0]}`")
    for reason, ks in sorted(export_refused.items(), key=lambda t: -len(t[1])):
        lines.append(f"- **export refused** ({len(ks)} cells): {reason}  \n  e.g. `{ks[0]}`")
    return lines + _per_model(results)


def main(argv=None) -> int:
    from kselect.oracle.export import kselect_exports
    from kselect.selector.base.files import atomic_write

    a = parse(argv)
    cells, configs = _cells(a)
    t0 = time.perf_counter()
    exports = kselect_exports(cells, a.rules, None, configs)
    uniq, export_refused = _distinct(cells, exports, a.limit)
    print(f"{len(exports)} of {len(cells)} cells selected by kselect (rules={a.rules})", file=sys.stderr, flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = out.with_name(out.name + ".parts.jsonl")  # finished chunks, for a re-run to resume from
    results = _run(a, uniq, configs, parts, t0)
    lines = _report(a, (len(exports), len(cells), len(uniq)), results, export_refused, t0)
    body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in results).encode()
    atomic_write(out.with_name(out.name + ".jsonl.gz"), gzip.compress(body, compresslevel=9, mtime=0))
    atomic_write(out.with_name(out.name + ".md"), "\n".join(lines) + "\n")
    parts.unlink(missing_ok=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
