"""The `registry` grid: every text-generation architecture of a vLLM release's registry whose config class ships
with transformers, one config.json each (kselect/oracle/registry_configs.py makes them in the release's venv).

A cell's `model` is the architecture's name; its config travels beside the record as
`<record>.configs.json` ({"transformers", "configs": {arch: config}, "remote_code", "config_errors"}), from which
kselect selects (`model=hf`, the config as `model.hf_config`) and the worker builds vLLM's model.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

from kselect.oracle.cells import (ATTENTION_BACKENDS, MLA_BACKENDS, MODELS_KV_DTYPES, PLATFORMS, SPARSE_MLA_BACKENDS,
                                  Cell)

GENERATOR = Path(__file__).resolve().parent / "registry_configs.py"
# the `wrappers` grid: the multimodal wrappers of registry decoders, their published-shaped configs beside them
WRAPPER_CONFIGS = Path(__file__).resolve().parent / "wrapper_configs.json"


def configs_path(out: Path, what: str = "configs") -> Path:
    """`oracle_registry_0_34_0.jsonl.gz` -> `oracle_registry_0_34_0.configs.json` (or .summary.json) beside it."""
    name = out.name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return out.with_name(f"{name}.{what}.json")


def summarize(records: list[dict], rep, ks: dict[str, dict], rules: str | None, out: Path) -> str:
    """The per-architecture report (printed) and its summary beside the record (docs/models.md reads it)."""
    from kselect.oracle.registry_report import figures, per_architecture, render
    from kselect.selector.base.files import atomic_write

    res = per_architecture(records, ks, rep)
    figs = figures(res)
    per = {a: {"status": r.status, "cells": r.cells, "vllm_selects": r.selects, "agree": r.agree,
               "note": r.build_errors[0] if r.status == "not buildable" else r.example} for a, r in sorted(res.items())}
    atomic_write(configs_path(out, "summary"), json.dumps({"rules": rules, **figs, "per_architecture": per},
                                                          indent=1, sort_keys=True) + "\n")
    return render(res, figs, "Wrappers" if out.name.startswith("oracle_wrappers_") else "Registry")


def make_configs(env, path: Path, wrappers: bool = False) -> dict:
    """The release's registry configs, or its wrappers' (made once in its venv, then read back from `path`)."""
    from kselect.selector.base.files import atomic_write

    if path.is_file():
        return load_configs(path)
    extra = ["--wrappers", str(WRAPPER_CONFIGS)] if wrappers else []
    res = subprocess.run([str(env.python), str(GENERATOR), "--src", str(env.src), *extra], capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        from kselect.oracle.run import WorkerError

        raise WorkerError(f"the registry's configs could not be made in vLLM {env.version}'s venv:\n{res.stderr[-2000:]}")
    data = json.loads(res.stdout)
    data["vllm"] = env.version
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def load_configs(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def backends_for(config: dict) -> tuple[str, ...]:
    """The pins of the architecture's family, from its config's fields: MLA (kv_lora_rank), sparse MLA (index_topk),
    else the attention backends."""
    t = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if t.get("kv_lora_rank"):
        return SPARSE_MLA_BACKENDS if t.get("index_topk") else MLA_BACKENDS
    return ATTENTION_BACKENDS


def registry_grid(configs: dict[str, dict], ccs=tuple(PLATFORMS), models=None, kv_dtypes=MODELS_KV_DTYPES,
                  backends=None, multimodal=(False,)) -> list[Cell]:
    """Architecture x capability x KV auto/fp8 [x vision mode: the wrappers grid] x auto and the family's pins (or a
    slice)."""
    names = [m for m in sorted(configs) if models is None or m in models]
    return [Cell(c, m, k, mm, None, b, "none")
            for c, m, k, mm in itertools.product(ccs, names, kv_dtypes, multimodal)
            for b in ("auto",) + backends_for(configs[m]) if backends is None or b in backends]


def write_model_dirs(configs: dict[str, dict], root: Path, models) -> dict[str, tuple[str, None]]:
    """A folder with config.json per architecture (the worker builds vLLM's model from it)."""
    from kselect.selector.base.files import atomic_write

    out = {}
    for m in models:
        d = Path(root) / m
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "config.json", json.dumps(configs[m], indent=1))
        out[m] = (str(d), None)
    return out
