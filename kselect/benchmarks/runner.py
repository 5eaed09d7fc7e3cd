"""`kselect bench experiment=<name> [key=value ...]`: one recorded measurement, run from the checkout root.

Each measurement is an experiment config, bench/conf/experiment/<name>.yaml (Hydra, as lightning-hydra-template's
`experiment/` configs): the steps it runs in order, each a Python module (`kselect.benchmarks.e2e`) or a script of
the checkout (`bench/h200/explain_vs_e2e.py`) with its options as a mapping, and the bench/results folder it was
recorded in. `dry_run=true` composes the config and has every step's own argument parser check its command line
without running it (no GPU needed); `--list` names the experiments.

    kselect bench experiment=rounds_e31p                    # on the H200
    kselect bench experiment=rounds_e31p steps.e2e.args.prefill-rounds=61 out=/tmp/e31p
    kselect bench experiment=rounds_e31p dry_run=true       # anywhere: the commands, checked
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import runpy
import shlex
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

CONF = Path("bench") / "conf"  # under the checkout root


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: str  # a module (kselect.benchmarks.e2e) or a script path under the checkout (bench/h200/x.py)
    args: dict[str, Any] = {}  # --key value; true: --key; false or null: left out; a list: --key v1 v2
    argv: list[str] = []  # positional arguments, after the options
    env: dict[str, str] = {}  # $VARS in values are expanded
    timeout_s: int | None = None


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


def argv_of(step: Step) -> list[str]:
    """The step's command line after the program: its options in config order, then argv."""
    out: list[str] = []
    for key, value in step.args.items():
        flag = f"--{key}"
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out + [str(a) for a in step.argv]


def expand(value: str) -> str:
    """$VAR from the environment, empty where unset; a leading or trailing ':' left by an empty one dropped."""
    return re.sub(r"\$(\w+)", lambda m: os.environ.get(m.group(1), ""), value).strip(":")


def is_script(run: str) -> bool:
    return run.endswith(".py") or "/" in run


def command(exp: Experiment, step: Step) -> list[str]:
    prog = [step.run] if is_script(step.run) else ["-m", step.run]
    return [exp.python, *prog, *argv_of(step)]


def find_root(start: Path) -> Path:
    for d in (start, *start.parents):
        if (d / CONF / "bench.yaml").is_file():
            return d
    raise BenchError(f"kselect bench: no {CONF / 'bench.yaml'} in {start} or above; run it from the kselect checkout "
                     "(bench/ is not installed with the package).")


def experiments(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / CONF / "experiment").glob("*.yaml"))


def compose(root: Path, overrides: list[str]) -> Experiment:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    names = experiments(root)
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")]
    if not chosen or chosen[-1] not in names:
        got = repr(chosen[-1]) if chosen else "none"
        raise BenchError(f"kselect bench: experiment: bad value {got}; allowed: {', '.join(names)} "
                         f"(the files of {CONF / 'experiment'}).")
    try:
        with initialize_config_dir(config_dir=str(root / CONF), version_base="1.3"):
            cfg = hydra_compose(config_name="bench", overrides=overrides)
        data = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise BenchError(f"kselect bench: {' '.join(str(e).split())}") from None
    data.pop("experiment", None)
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        from kselect.selector.base.errors import format_validation_error

        raise BenchError(f"kselect bench experiment={chosen[-1]}: {format_validation_error(e)}") from None


class _Parsed(BaseException):  # not an Exception: a program's own `except Exception` must not catch it
    pass


@contextmanager
def _parse_only(argv0: str, argv: list[str]):
    """Every ArgumentParser stops right after a successful parse (parse_args, or parse_known_args called by the program
    itself); the program's argv is `argv`."""
    original, original_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    saved, inside = sys.argv, []

    def parse_args(self, args=None, namespace=None):
        inside.append(1)
        try:
            ns = original(self, args, namespace)
        finally:
            inside.pop()
        raise _Parsed(ns)

    def parse_known_args(self, args=None, namespace=None):
        got = original_known(self, args, namespace)
        if inside:  # parse_args's own call: it checks what is left
            return got
        raise _Parsed(got)

    argparse.ArgumentParser.parse_args = parse_args
    argparse.ArgumentParser.parse_known_args = parse_known_args
    sys.argv = [argv0, *argv]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = original, original_known
        sys.argv = saved


def _run_main(name: str) -> None:
    """`python -m name`, in this process, from the module's source (not through a loader: under pytest the assertion
    rewriter's loader cannot give runpy the code)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module named {name!r}")
    if spec.submodule_search_locations is not None:  # a package: its __main__
        spec = importlib.util.find_spec(f"{name}.__main__")
        if spec is None or spec.origin is None:
            raise ImportError(f"{name!r} is a package without __main__")
    code = compile(Path(spec.origin).read_text(), spec.origin, "exec")
    exec(code, {"__name__": "__main__", "__package__": spec.parent, "__file__": spec.origin, "__builtins__": __builtins__})


def check_argv(root: Path, prog: str, argv: list[str], where: str) -> None:
    """`prog` (a module or a script under `root`) parses `argv` with its own argument parser; nothing after the parse
    runs. Raises BenchError where the program is missing, its parser refuses argv, or it parses no arguments."""
    if is_script(prog) and not (root / prog).is_file():
        raise BenchError(f"{where}: bad value {prog!r}; allowed: a script under the checkout or a module name.")
    try:
        with _parse_only(prog, argv):
            if is_script(prog):
                runpy.run_path(str(root / prog), run_name="__main__")
            else:
                _run_main(prog)
    except _Parsed:
        return
    except SystemExit as e:
        if e.code not in (0, None):
            raise BenchError(f"{where}: its parser refused `{shlex.join(argv)}` (above).") from None
    except ImportError as e:
        raise BenchError(f"{where}: bad value {prog!r}: {e}") from None
    raise BenchError(f"{where}: {prog!r} finished without parsing arguments; allowed: argparse programs.")


def check(root: Path, exp: Experiment, name: str, step: Step) -> None:
    check_argv(root, step.run, argv_of(step), f"kselect bench experiment={exp.name}: steps.{name}.run")


def step_environ(root: Path, env: dict[str, str]) -> dict[str, str]:
    """The steps' environment: ours plus the experiment's. Where kselect is not installed (a bare checkout, as on the
    H200), the checkout goes first on PYTHONPATH, so scripts under bench/ import the kselect the runner runs."""
    from importlib.metadata import PackageNotFoundError, distribution

    out = {**os.environ, **env}
    try:
        distribution("kselect")
    except PackageNotFoundError:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), out.get("PYTHONPATH", "")) if p)
    return out


def run(root: Path, exp: Experiment) -> int:
    out = Path(exp.out)
    if not exp.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    for name, step in exp.steps.items():
        cmd = command(exp, step)
        env = {k: v for k, v in ((k, expand(v)) for k, v in {**exp.env, **step.env}.items()) if v}  # unset: left out
        shown = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(cmd)])
        print(f"=== {name}: {shown}", flush=True)
        if exp.dry_run:
            check(root, exp, name, step)
            continue
        try:
            rc = subprocess.run(cmd, cwd=root, env=step_environ(root, env), timeout=step.timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        print(f"=== {name}: exit {rc}", flush=True)
        if rc:
            return rc
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        root = find_root(Path.cwd())
        if argv[:1] == ["--list"]:
            for name in experiments(root):
                print(name)
            return 0
        return run(root, compose(root, argv))
    except BenchError as e:
        print(e, file=sys.stderr)
        return 2
