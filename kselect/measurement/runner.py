"""`kselect bench`'s library (kselect/commands/bench.py is the command, its module docstring the usage): an
experiment config (bench/conf/experiment/<name>.yaml) composed with Hydra into a typed Experiment, each step's options
validated into that step's typed options (kselect/measurement/steps.py) before anything runs, then the steps run in
order, each in its own process on its options file; a dry run prints what would run and runs nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kselect.measurement.steps import STEPS, options_of

CONF = Path("bench") / "conf"  # under the checkout root


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: str  # a step of kselect/measurement/steps.py, by name
    options: dict[str, Any] = {}  # validated into the step's typed options (steps.options_of)
    env: dict[str, str] = {}  # $VARS in values are expanded
    timeout_s: int | None = Field(default=None, gt=0)


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    records: list[str] = []  # bench/results folders this experiment's outputs were recorded in
    out: str
    dry_run: bool = False
    python: str = sys.executable
    env: dict[str, str] = {}
    steps: dict[str, Step]


class BenchError(Exception):
    """A bad experiment or override: one paragraph, exit status 2."""


def expand(value: str) -> str:
    """$VAR from the environment, empty where unset; a leading or trailing ':' left by an empty one dropped."""
    return re.sub(r"\$(\w+)", lambda m: os.environ.get(m.group(1), ""), value).strip(":")


def find_root(start: Path) -> Path:
    for d in (start, *start.parents):
        if (d / CONF / "bench.yaml").is_file():
            return d
    raise BenchError(f"kselect bench: no {CONF / 'bench.yaml'} in {start} or above; run it from the kselect checkout "
                     "(bench/ is not installed with the package).")


def experiments(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / CONF / "experiment").glob("*.yaml"))


def check_overrides(overrides: list[str], names: list[str]) -> str:
    """The experiment the overrides choose; Hydra's own settings are refused (the runner writes only under out=)."""
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0]
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            raise BenchError(f"kselect bench: {o}: {key} is a Hydra setting; allowed: the experiment's own keys "
                             "(kselect bench writes only under out=, and runs no Hydra job).")
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")]
    if not chosen or chosen[-1] not in names:
        got = repr(chosen[-1]) if chosen else "none"
        raise BenchError(f"kselect bench: experiment: bad value {got}; allowed: {', '.join(names)} "
                         f"(the files of {CONF / 'experiment'}).")
    return chosen[-1]


def compose(root: Path, overrides: list[str]) -> Experiment:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    name = check_overrides(overrides, experiments(root))
    try:
        with initialize_config_dir(config_dir=str(root / CONF), version_base="1.3"):
            cfg = hydra_compose(config_name="bench", overrides=overrides)
        data = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise BenchError(f"kselect bench: {' '.join(str(e).split())}") from None
    data.pop("experiment", None)
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as e:
        from kselect.selector.base.errors import format_validation_error

        raise BenchError(f"kselect bench experiment={name}: {format_validation_error(e)}") from None
    check(exp)
    return exp


def _out_path(value: str, key: str) -> None:
    """An output folder: refuse an empty one, one that is a file, and one under a file, before anything runs."""
    if not str(value).strip():
        raise BenchError(f"kselect bench: {key}: bad value {value!r}; allowed: a folder path (created if missing)")
    p = Path(value)
    if p.exists() and not p.is_dir():
        raise BenchError(f"kselect bench: {key}={value}: an existing file; allowed: a folder path (created if missing)")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir() or not os.access(parent, os.W_OK):
                raise BenchError(f"kselect bench: {key}={value}: {parent} is not a folder this user may write; "
                                 "allowed: a folder path under a writable folder")
            return


def check(exp: Experiment) -> None:
    """Everything a run needs, checked before any step runs: the interpreter, the output folders, each step a
    project step with options its typed options accept."""
    python = shutil.which(exp.python) if os.sep not in exp.python else exp.python
    if not python or not Path(python).is_file() or not os.access(python, os.X_OK):
        raise BenchError(f"kselect bench: python: bad value {exp.python!r}; allowed: an executable Python interpreter")
    _out_path(exp.out, "out")
    for name, step in exp.steps.items():
        where = f"steps.{name}"
        if step.run not in STEPS:
            raise BenchError(f"kselect bench experiment={exp.name}: {where}.run: bad value {step.run!r}; allowed: "
                             f"{', '.join(STEPS)} (the project's own measurement steps, kselect/measurement/steps.py; "
                             "a script or module of one's own is not run).")
        try:
            opts = options_of(step.run).model_validate(step.options)
        except ValidationError as e:
            bad = "; ".join(f"{where}.options.{'.'.join(map(str, err['loc']))}: {err['msg']} (got {err.get('input')!r})"
                            if err["type"] != "extra_forbidden" else
                            f"{where}.options.{'.'.join(map(str, err['loc']))}: unknown option"
                            for err in e.errors())  # fmt: skip
            raise BenchError(f"kselect bench experiment={exp.name}: {bad}; allowed: the fields of "
                             f"{STEPS[step.run]}.Options") from None
        for key, value in opts:
            if key == "out" or key.endswith("_out"):
                _out_path(str(value), f"{where}.options.{key}")


def step_command(exp: Experiment, name: str) -> list[str]:
    return [exp.python, "-m", "kselect.measurement.steps", exp.steps[name].run, str(Path(exp.out) / f"{name}.json")]


def step_environ(root: Path, env: dict[str, str]) -> dict[str, str]:
    """The steps' environment: ours plus the experiment's. Where kselect is not installed (a bare checkout), the
    checkout goes first on PYTHONPATH."""
    from importlib.metadata import PackageNotFoundError, distribution

    out = {**os.environ, **env}
    try:
        distribution("kselect")
    except PackageNotFoundError:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), out.get("PYTHONPATH", "")) if p)
    return out


def run(root: Path, exp: Experiment) -> int:
    out = Path(exp.out)
    for name, step in exp.steps.items():
        env = {k: v for k, v in ((k, expand(v)) for k, v in {**exp.env, **step.env}.items()) if v}  # unset: left out
        options = options_of(step.run).model_validate(step.options).model_dump(mode="json")
        shown = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(step_command(exp, name))])
        print(f"=== {name}: {shown}", flush=True)
        print(f"    options: {json.dumps(options)}", flush=True)
        if exp.dry_run:
            continue
        out.mkdir(parents=True, exist_ok=True)
        from kselect.selector.base.files import atomic_write

        atomic_write(out / f"{name}.json", json.dumps(options, indent=1) + "\n")
        try:
            rc = subprocess.run(step_command(exp, name), cwd=root, env=step_environ(root, env),
                                timeout=step.timeout_s).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            rc = 124
        print(f"=== {name}: exit {rc}", flush=True)
        if rc:
            return rc
    return 0
