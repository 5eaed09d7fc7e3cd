"""`kselect oracle SOURCE`: track a vLLM release in one command.

    kselect oracle 0.34.0                      # a release on the package registry (or `latest`)
    kselect oracle ./vllm-0.34.0-*.whl         # a local wheel
    kselect oracle ~/src/vllm                  # an unpacked source tree (the folder holding vllm/)

Builds or reuses the release's CPU environment (kselect/oracle/env.py), runs vLLM's own
selection chain over the Gemma-4 grid (or, with `--grid models`, the other model families'
presets) into a versioned record (resumable: cells already in
--out or its .parts/ folder are kept), compares the record with a rules preset, prints the
agreement per field and every disagreement class with example cells, and exits 1 when a field's
agreement is below --min-agreement. Every cell counts: where vLLM selects and kselect refuses
(exit 2) it is a disagreement. kselect never imports vLLM: the chain runs in the release's own
python (kselect/oracle/worker.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from kselect.oracle.cells import (BACKEND_PINS, HF_MODELS, KV_DTYPES, MODELS, MODELS_BACKEND_PINS,
                                  MODELS_KV_DTYPES, PLATFORMS, SPEC, grid, models_grid)


class BadInput(Exception):
    """One paragraph for stderr, exit 2."""


# per grid: each filter's allowed values (also its default: all of them)
GRID_AXES = {
    "gemma4": {"cc": PLATFORMS, "model": MODELS, "kv": KV_DTYPES, "mm": ("0", "1"), "fa": ("-", "3", "4"),
               "backend": BACKEND_PINS, "spec": SPEC},
    "models": {"cc": PLATFORMS, "model": HF_MODELS, "kv": MODELS_KV_DTYPES, "mm": ("0",), "fa": ("-",),
               "backend": MODELS_BACKEND_PINS, "spec": ("none",)},
    # the registry's architectures are known once the release's configs are made (kselect/oracle/registry.py)
    "registry": {"cc": PLATFORMS, "model": None, "kv": MODELS_KV_DTYPES, "mm": ("0",), "fa": ("-",),
                 "backend": MODELS_BACKEND_PINS, "spec": ("none",)},
}
# the multimodal wrappers of registry decoders (kselect/oracle/registry_configs.py WRAPPERS), served with and
# without images (--mm 1: the vision tower built; 0: --language-model-only)
GRID_AXES["wrappers"] = {**GRID_AXES["registry"], "mm": ("0", "1")}
STEMS = {"gemma4": "oracle_", "models": "oracle_models_", "registry": "oracle_registry_", "wrappers": "oracle_wrappers_"}
CONFIG_GRIDS = ("registry", "wrappers")  # grids whose models are configs made in the release's venv


def _check_filter(name: str, values: list[str], allowed, grid_name: str = "gemma4") -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise BadInput(f"kselect oracle: --{name} {bad[0]!r} is not a value of the {grid_name} grid (--grid); "
                       f"allowed: {', '.join(allowed)}.")


def _cells(a: OracleRun, configs: dict | None = None):
    axes = dict(GRID_AXES[a.grid])
    if a.grid in CONFIG_GRIDS:
        axes["model"] = tuple(sorted(configs or ()))
    f = {name: list(allowed) if getattr(a, name) is None else list(getattr(a, name)) for name, allowed in axes.items()}
    for name, allowed in axes.items():
        _check_filter(name, f[name], list(allowed), a.grid)
    if a.grid in CONFIG_GRIDS:
        from kselect.oracle.registry import registry_grid

        return registry_grid(configs or {}, ccs=f["cc"], models=f["model"], kv_dtypes=f["kv"], backends=f["backend"],
                             multimodal=[m == "1" for m in f["mm"]])
    if a.grid == "models":
        return models_grid(ccs=f["cc"], models=f["model"], kv_dtypes=f["kv"], backends=f["backend"])
    return grid(ccs=f["cc"], models=f["model"], kv_dtypes=f["kv"], multimodal=[m == "1" for m in f["mm"]],
                fa_pins=[None if x == "-" else int(x) for x in f["fa"]], backends=f["backend"], spec=f["spec"])


def _rules_options() -> list[str]:
    from kselect.selector.api import CONF_DIR
    from kselect.selector.base.files import group_options

    return group_options(CONF_DIR, "rules")


def _rules_for(a: OracleRun, version: str) -> str | None:
    opts = _rules_options()
    if a.rules is not None:
        if a.rules not in opts:
            raise BadInput(f"kselect oracle: --rules {a.rules!r}: no such rules option; allowed: {', '.join(opts)}.")
        return a.rules
    own = "vllm_" + version.replace(".", "_")
    return own if own in opts else None


def worker_cmd(env) -> list[str]:
    """The release's python on worker.py: the only process that imports vLLM."""
    from kselect.oracle.run import WORKER

    return [str(env.python), "-u", str(WORKER), "--src", str(env.src), "--version", env.version]


def _ray_available(address: str) -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise BadInput(f"kselect oracle: --ray-address {address}: Ray is not installed; it is an optional extra: "
                       "pip install 'kselect[ray]'.") from None


@dataclass(frozen=True)
class OracleRun:
    """What `kselect oracle` runs (kselect/commands/oracle.py maps its flags, with their help, to these fields)."""

    source: str  # a vLLM version on the package registry (or `latest`), a wheel or an unpacked source folder
    rules: str | None = None  # the rules option to compare with; None: vllm_<version> if it exists, else the default
    grid: str = "gemma4"  # GRIDS
    out: str | None = None  # the record; None: oracle_[models_|registry_]<version>.jsonl.gz here
    min_agreement: float = 99.5  # exit 1 when any field agrees on less (percent)
    jobs: int = 2  # worker processes (or Ray actors) at once
    batch_size: int = 48  # cells per batch
    ray_address: str | None = None  # run the batches as actors on this Ray cluster
    examples: int = 3  # example cells per disagreement class
    limit: int | None = None  # print at most this many disagreement classes
    report: str | None = None  # also the report as Markdown to this file
    json_out: str | None = None  # also the report as JSON to this file
    no_compare: bool = False  # only run the record
    dry_run: bool = False  # resolve the release, the cells and what is recorded; run nothing
    # grid filters (None: every value of the grid's axis, GRID_AXES)
    cc: tuple[str, ...] | None = None
    model: tuple[str, ...] | None = None
    kv: tuple[str, ...] | None = None
    mm: tuple[str, ...] | None = None
    fa: tuple[str, ...] | None = None
    backend: tuple[str, ...] | None = None
    spec: tuple[str, ...] | None = None


def track(a: OracleRun) -> int:
    """Run the release's chain over the grid into the record, then compare it with the rules option: 0, or 1 below
    --min-agreement. Bad input raises BadInput (or KSelectError, RecordError); a dead worker WorkerError."""
    from kselect.oracle import env as envmod

    check_arguments(a)  # the whole strings and the output paths, before any network, cache or disk work
    cells = _cells(a) if a.grid not in CONFIG_GRIDS else None
    if a.ray_address:
        _ray_available(a.ray_address)
    release = envmod.resolve(a.source)
    rules = None if a.no_compare else _rules_for(a, release.version)
    out = Path(a.out or f"{STEMS[a.grid]}{release.version.replace('.', '_')}.jsonl.gz")
    if a.out and not out.parent.is_dir():
        raise BadInput(f"kselect oracle: --out {a.out}: the folder {out.parent} does not exist.")
    for flag, path in (("--out", a.out), ("--report", a.report), ("--json", a.json_out)):  # refused before any work
        if path and (Path(path).is_dir() or not Path(path).parent.is_dir()):
            raise BadInput(f"kselect oracle: {flag} {path}: not a file in an existing folder; allowed: a file path "
                           "whose folder exists.")
    configs = model_dirs = None
    if a.grid in CONFIG_GRIDS:
        from kselect.oracle import registry

        cpath = registry.configs_path(out)
        if a.dry_run and not cpath.is_file():
            raise BadInput(f"kselect oracle: --grid {a.grid} --dry-run: {cpath} is not made yet (a run makes it "
                           "in the release's venv first).")
        configs = (registry.load_configs(cpath) if a.dry_run else
                   registry.make_configs(envmod.ensure(release), cpath, wrappers=a.grid == "wrappers"))["configs"]
        cells = _cells(a, configs)

        def model_dirs(root, models):
            return registry.write_model_dirs(configs, root, models)
    if a.dry_run:
        return _dry_run(release, cells, out, rules, a)
    env = envmod.ensure(release)
    from kselect.oracle.run import run_grid

    res = run_grid(cells, out, worker_cmd(env), jobs=a.jobs, batch_size=a.batch_size,
                   ray_address=a.ray_address, model_dirs=model_dirs)
    print(f"oracle: vLLM {release.version}: {res.cells} cells in {out} ({res.ran} run in {res.seconds:.0f} s)",
          file=sys.stderr)
    if a.no_compare:
        return 0
    return _compare(out, rules, release.version, a, configs)


def check_arguments(a: OracleRun) -> None:
    """Every string argument whole (no control character, a length the file system can name) and every output path
    writable as a file in an existing folder: refused before the release is resolved (no registry, no cache)."""
    from kselect.selector.base.files import check_out_path
    from kselect.selector.base.reading import check_lengths, short

    for flag, value in (("SOURCE", a.source), ("--rules", a.rules), ("--ray-address", a.ray_address),
                        *((f, v) for f, v in (("--out", a.out), ("--report", a.report), ("--json", a.json_out)))):
        if value is not None and (not value or any(ord(ch) < 32 or ord(ch) == 127 for ch in value)):
            raise BadInput(f"kselect oracle: {flag} {short(value)}: empty or holds a control character (a newline?); "
                           "allowed: printable text")
    check_lengths(a.source, f"SOURCE {short(a.source)}")
    for flag, path in (("--out", a.out), ("--report", a.report), ("--json", a.json_out)):
        if path is None:
            continue
        check_out_path(path, flag)
        if not Path(path).parent.is_dir():
            raise BadInput(f"kselect oracle: {flag} {short(path)}: the folder {Path(path).parent} does not exist; "
                           "allowed: a file path whose folder exists.")


def _dry_run(release, cells, out, rules, a) -> int:
    from kselect.oracle import env as envmod
    from kselect.oracle.run import Parts, make_batches, read_lines

    have = read_lines(out)
    have.update(Parts(out).done())
    todo = [c for c in cells if c.key not in have]
    plan = {**envmod.plan(release), "grid": a.grid, "cells": len(cells), "recorded": len(cells) - len(todo), "to_run": len(todo),
            "batches": len(make_batches(todo, a.batch_size)), "jobs": a.jobs, "ray_address": a.ray_address,
            "out": str(out), "rules": rules, "min_agreement": a.min_agreement}
    print(json.dumps(plan, indent=1))
    return 0


def _compare(out: Path, rules: str | None, version: str, a, configs: dict | None = None) -> int:
    from kselect.oracle.cells import FIELDS
    from kselect.oracle.compare import compare, load_records, render, to_json
    from kselect.selector.base.files import atomic_write

    from kselect.oracle.cells import Cell
    from kselect.oracle.compare import kselect_records

    records = load_records(out)
    ks = kselect_records([Cell.from_dict(r["cell"]) for r in records], rules, None, configs)
    rep = compare(records, rules=rules, kselect=ks)
    head = f"# kselect `rules={rules or '(config default)'}` against vLLM {version}'s own chain\n\n"
    text = render(rep, a.limit, examples=a.examples)
    if configs is not None:  # the registry grid: per architecture, and its two figures
        from kselect.oracle.registry import summarize

        text += "\n" + summarize(records, rep, ks, rules, out)
    low = [f for f in FIELDS if 100 * rep.rate(f) < a.min_agreement]
    verdict = (f"\nbelow --min-agreement {a.min_agreement}%: {', '.join(low)}" if low
               else f"\nevery field at or above --min-agreement {a.min_agreement}%")
    print(text + verdict)
    if a.report:
        atomic_write(Path(a.report), head + text + "\n" + verdict.strip() + "\n")
    if a.json_out:
        atomic_write(Path(a.json_out), json.dumps({"vllm": version, "record": str(out), **to_json(rep)}, indent=1) + "\n")
    return 1 if low else 0
