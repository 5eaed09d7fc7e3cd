"""Sweeps on Hydra's own engine: a multirun over the matrix axes, one selection per job.

    kselect sweep -m platform=sm80,sm90 kv_cache=auto,fp8                       # basic launcher
    kselect sweep -m platform=sm80,sm90 kv_cache=auto,fp8 hydra/launcher=joblib  # local processes
    kselect sweep -m matrix=seed_smoke overlay=[pr48666]   # the axes (and rules) of conf/matrix/seed_smoke.yaml
    kselect gather multirun/<date>/<time>                # one table of every job

Every job composes the normal kselect config (conf/config.yaml plus its overrides), resolves
it and writes `selection.json` into its Hydra output directory (`<sweep dir>/<job number>/`):
the overrides, the outcome (`ok`, `invalid` for a SelectionError, `config error` for a
config that does not validate) and the selection as `kselect select output=json` prints it.
A failing cell never stops the sweep. Set the directory with `hydra.sweep.dir=...`.

`matrix=<name>` (handled before Hydra sees the command line) becomes one sweep override per
declared axis of conf/matrix/<name>.yaml (`platform=cpu,sm90 model=... kv_cache=...
kv_cache.scales=... spec_decode=... model.multimodal=...`). Hydra's basic sweeper takes the
full product, so the matrix's `skip:` entries and `pins:` do not apply: skipped combinations
run and report `config error`. Use `kselect diff` / `selector.matrix` for the fast
in-process matrix; use this module when each cell is a real job (e.g. a kernel benchmark per
cell launched on a cluster).

On a cluster: the launcher is one override away, nothing here changes.

- Slurm via submitit: `pip install hydra-submitit-launcher`, then
  `kselect sweep -m ... hydra/launcher=submitit_slurm hydra.launcher.partition=<p>
  hydra.launcher.timeout_min=10 hydra.launcher.gpus_per_node=1` (or `submitit_local` to try it
  on one machine). Jobs write selection.json on the shared filesystem; gather as usual.
- Ray: `pip install hydra-ray-launcher`, then `hydra/launcher=ray` for a local/attached Ray
  cluster (`hydra.launcher.ray.init.address=auto`), or `hydra/launcher=ray_aws` with its
  cluster config. selection.json is written where the job runs; `ray_aws` syncs the sweep dir
  back (`hydra.launcher.sync_down`).
Defaults for a site can live in a Hydra config (`conf/hydra/launcher/<site>.yaml`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from ..config.compose import CONF_DIR, compose_raw, validate
from ..base.hydra_app import spelled_release, task_overrides
from ..base.errors import KSelectError, SelectionError, one_line
from ..base.files import atomic_write
from ..config.guard import SWEEP_HYDRA_KEYS, check_conf_tree, check_overrides
from ..review.matrix import load_matrix
from ..evidence.evidence import Evidence
from ..export.render import as_dict
from ..measure.select import select

# matrix axis -> the Hydra key it sweeps
HYDRA_KEYS = {
    "platform": "platform",
    "model": "model",
    "dtype": "model.dtype",
    "kv_cache": "kv_cache",
    "scales": "kv_cache.scales",
    "spec_decode": "spec_decode",
    "multimodal": "model.multimodal",
}


def matrix_overrides(name: str) -> list[str]:
    """The sweep overrides (comma lists) of a matrix's declared axes, and its rules option."""
    spec = load_matrix(name)
    out = []
    for axis, key in HYDRA_KEYS.items():
        if axis in spec.axes:
            vals = ["true" if v is True else "false" if v is False else str(v) for v in spec.axes[axis]]
            out.append(f"{key}={','.join(vals)}")
    if spec.rules:  # the rules option the matrix declares (its overlays patch those rules)
        out.append(f"rules={spec.rules}")
    return out


def run_job(cfg: DictConfig, overrides: list[str]) -> dict:
    """Resolve one composed config; never raises for a bad cell."""
    record: dict = {"overrides": list(overrides)}
    try:
        data = compose_raw(overrides) if spelled_release() else OmegaConf.to_container(cfg, resolve=True)
        kcfg = validate(data, overrides)
        sel = select(kcfg, Evidence.load(CONF_DIR))  # the evidence of the conf tree the job composed from
        record.update(outcome="ok", selection=as_dict(sel))
    except SelectionError as e:
        record.update(outcome="invalid", error=str(e))
    except KSelectError as e:
        record.update(outcome="config error", error=str(e))
    return record


SWEEP_ENV = "KSELECT_SWEEP"  # "<sweep id>:<number of jobs>", set by main for every job
FLAGS = ("-m", "--multirun")
# Hydra's flags that only print (they never read files or run code from elsewhere); --config-dir,
# --config-path, --config-name, --experimental-rerun (a pickle), --package and --shell-completion
# stay refused (selector/config/guard.py, tests/selector/test_fuzz.py).
PRINT_FLAGS = ("--help", "-h", "--help-all", "--cfg", "-c", "--info", "-i", "--resolve", "job", "hydra", "all", "config", "defaults",
               "defaults-tree", "plugins", "searchpath")


def job(cfg: DictConfig) -> int:
    """One job. Under -m it writes selection.json into its output directory; a plain run (no -m)
    prints the record instead and writes nothing, unless hydra.run.dir=<dir> names one."""
    hc = HydraConfig.get()
    record = run_job(cfg, task_overrides())
    num = OmegaConf.select(hc, "job.num", default=None, throw_on_missing=False)  # missing outside -m
    record["job"] = {"num": num, "launcher": hc.runtime.choices.get("hydra/launcher")}
    sweep_id, _, jobs = os.environ.get(SWEEP_ENV, ":").partition(":")
    record["sweep"] = {"id": sweep_id or None, "jobs": int(jobs) if jobs.isdigit() else None}
    out = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.RUN and out.resolve() == Path.cwd().resolve():
        print(json.dumps(record, indent=2))
        return 0
    prev = out / "selection.json"
    if prev.exists():  # never mix two sweeps in one job directory: the second one is refused
        raise KSelectError(f"sweep: {prev} already exists (another sweep wrote there); allowed: a new hydra.sweep.dir")
    atomic_write(prev, json.dumps(record, indent=2) + "\n")
    groups = record.get("selection", {}).get("groups", [])
    summary = ", ".join(f"{g['kind']}={g['backend']}" for g in groups if not g["draft"]) or one_line(record.get("error", ""))
    print(f"[kselect job {num}] {' '.join(record['overrides'])}: {record['outcome']}: {summary}")
    return 0


def plan(argv: list[str]) -> tuple[list[str], int]:
    """Check the command line; return it (matrix= expanded) and the number of jobs it launches."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # noqa: PLC0415
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415

    out: list[str] = []
    for a in argv:
        if a.startswith("matrix="):
            out += matrix_overrides(a.split("=", 1)[1])
        elif a.startswith("-") and a not in FLAGS and a not in PRINT_FLAGS:
            raise KSelectError(f"sweep: option {a!r} is not supported; allowed: -m/--multirun, Hydra's printing flags "
                               "(--help, --cfg, --info, --resolve) and key=value overrides")
        else:
            out.append(a)
    overrides = [a for a in out if a not in FLAGS and a not in PRINT_FLAGS and not a.startswith("-")]
    check_conf_tree(CONF_DIR)
    check_overrides(overrides, CONF_DIR, SWEEP_HYDRA_KEYS)
    for o in overrides:
        if "@" in o.split("=", 1)[0]:
            raise KSelectError(f"sweep: {o}: package overrides (group@package) are not supported; allowed: group=option, key=value")
    try:
        jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)[0]
    except Exception as e:  # noqa: BLE001 - a malformed sweep: Hydra's message, one paragraph
        raise KSelectError(f"sweep: {' '.join(overrides)}: {' '.join(str(e).split())}") from None
    multirun = any(a in FLAGS for a in out)
    if multirun and not any(o.startswith("hydra.sweep.dir=") for o in overrides):
        out.append(f"hydra.sweep.dir=multirun/{time.strftime('%Y-%m-%d/%H-%M-%S')}-{uuid.uuid4().hex[:8]}")
    elif multirun:
        d = Path(next(o for o in overrides if o.startswith("hydra.sweep.dir=")).split("=", 1)[1])
        if d.is_dir() and any(d.rglob("selection.json")):
            raise KSelectError(f"sweep: hydra.sweep.dir={d} already holds a sweep's selection.json files; allowed: a new or empty directory")
    return out, len(jobs)


RENAMED = {"overlays": "write overlay=[pr48666,...] (the config group conf/overlay/)"}
