"""Every `kselect <command>` that takes Hydra overrides is a real Hydra app (`hydra.main`):
`--help`, `--hydra-help`, `--cfg job|hydra|all`, `--info`, `-m/--multirun`, `-c`,
`--shell-completion` and `hydra.*` overrides behave as in any Hydra app.

What kselect adds around `hydra.main`:

- A plain run writes nothing: unless the command line asks for an output directory
  (`hydra.run.dir=...`, `-m`), the app runs with `hydra.run.dir=.`, `hydra.output_subdir=null`
  and `hydra/job_logging=none`, so there is no `outputs/` and no log file. Asking for a
  directory gets Hydra's usual record (`<dir>/.hydra/`); `-m` writes it under Hydra's
  `multirun/<date>/<time>/` in the current folder (or `hydra.sweep.dir=...`), and says so on stderr. These defaults are plain leading
  overrides, so any later one on the command line wins and `--cfg hydra` shows them.
- Errors are one paragraph on stderr and exit status 2 (the project's contract): a config
  Hydra cannot compose (an unknown option or key, an override it cannot parse) and every
  `KSelectError` the command raises. `HYDRA_FULL_ERROR=1` still gives Hydra's traceback.
- `renamed`: old spellings of keys (e.g. `overlays=`) exit 2 naming the new one.
- Each command's `--help` shows its own docstring (`hydra/help=kselect_<command>`).

The command line is told apart and checked before Hydra reads it in app_argv.py; compose errors are worded in
compose_errors.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from . import completion, hooks
from .app_argv import (check_hydra_additions, check_no_code, check_one_mode, expand_home, quote_values, split_argv,
                       wants_output)
from .cli_errors import (DEBUG_FLAG, INTERNAL_ERROR, check_printable, check_renamed, debug_enabled, internal_error,
                         report_error, strip_debug)
from .compose_errors import compose_error, with_hint
from .short_help import short_help
from ..base.errors import KSelectError
from .extras import check_plugins
from .group_values import check_group_values

Task = Callable[[DictConfig], int]

# Hydra's default help, with the command's own text above the config groups and the config.
_HELP_TEMPLATE = """${hydra.help.header}
== Configuration groups ==
Compose your configuration from those groups (group=option)

$APP_CONFIG_GROUPS

== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

${hydra.help.footer}"""


@dataclass(frozen=True)
class _App:
    """The Hydra app `kselect <command>`: its help text and the config it composes."""

    command: str
    doc: str
    config_name: str
    config_dir: Path | None


@dataclass
class _Status:
    code: int = 0  # the worst job's exit status
    started: bool = False  # a job ran: an error after this is no longer the command line's
    said: bool = False  # -m's output folder was named


def _register_help(command: str, doc: str) -> str:
    name = f"kselect_{command}"
    ConfigStore.instance().store(
        group="hydra/help", name=name,
        node={"app_name": f"kselect {command}", "header": doc.strip(),
              "footer": "Hydra flags: --cfg job|hydra|all, --info, -m/--multirun, -c, --shell-completion, "
                        f"hydra.* overrides (kselect {command} --hydra-help).",
              "template": _HELP_TEMPLATE},
    )  # fmt: skip
    return name


def run_app(command: str, task: Task, *, doc: str, config_name: str, config_dir: Path | None = None,
            renamed: dict[str, str] | None = None) -> None:
    """Run `task(cfg)` as the Hydra app `kselect <command>` on sys.argv; exits with its status."""
    app = _App(command, doc, config_name, config_dir)
    argv, flags, overrides = _own_flags(app)
    # kselect's defaults lead, the user's overrides follow (the later value of a key wins); Hydra's
    # flags go first (argparse takes the overrides as one positional list).
    lead = [f"hydra.job.name=kselect_{command}", f"hydra/help={_register_help(command, doc)}"]
    if not wants_output(argv):
        lead += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none"]
    try:
        check_printable(argv)
        hydra_overrides = _checked(app, flags, overrides, lead, renamed or {})
    except KSelectError as e:
        report_error(e)
        sys.exit(2)
    sys.argv[:] = [f"kselect {command}", *flags, *lead, *quote_values(hydra_overrides)]  # hydra.main reads only sys.argv
    status = _Status()

    @hydra.main(config_path=str(config_dir) if config_dir else None, config_name=config_name, version_base="1.3")
    def _app(cfg: DictConfig) -> None:
        _job(app, task, cfg, argv, status)

    _run_reporting_compose_errors(_app, app, argv, overrides, status)
    sys.exit(status.code)


def _checked(app: _App, flags: list[str], overrides: list[str], lead: list[str], renamed: dict[str, str]) -> list[str]:
    """The overrides Hydra composes, once every check before Hydra passed (each raises KSelectError)."""
    check_no_code(overrides)
    check_renamed(app.command, overrides, renamed)
    check_one_mode(app.command, flags)
    check_group_values(overrides, app.config_dir)  # before Hydra: its ValueError for `model=null` names no key
    check_plugins(overrides)
    check_hydra_additions(overrides, lead, app.config_name, app.config_dir)
    if app.config_name == "config" and app.config_dir:
        return _spell_release(overrides, app.config_dir)
    return overrides


def _job(app: _App, task: Task, cfg: DictConfig, argv: list[str], status: _Status) -> None:
    """One job of the app: the task's status (a KSelectError: 2; a bug: 3, said here before Hydra adds its own
    "Error executing job"); a plain run exits with it at once."""
    status.started = True
    _say_multirun_dir(app.command, status)
    # The task composes other configs with Hydra's compose API (the matrix, a selection per
    # cell), which refuses to start while this app holds GlobalHydra: lend it, then restore.
    gh = GlobalHydra.instance()
    held, gh.hydra = gh.hydra, None
    try:
        code = task(cfg)
    except KSelectError as e:
        report_error(e)
        code = 2
    except BrokenPipeError:
        code = 0
    except Exception as e:  # noqa: BLE001 - a bug
        if debug_enabled():
            raise
        report_error(internal_error(e, ["kselect", app.command, *argv]))
        code = INTERNAL_ERROR
    finally:
        gh.hydra = held
    status.code = max(status.code, code or 0)
    if code and HydraConfig.get().mode == RunMode.RUN:
        sys.exit(code)


def _own_flags(app: _App) -> tuple[list, list, list]:
    """sys.argv's kselect flags, handled before Hydra: --debug (Hydra's parser knows no such flag), a help page (Hydra's
    whole help is --help-all), completion install/uninstall. The rest: (argv, Hydra's flags, overrides)."""
    argv = sys.argv[1:]
    if DEBUG_FLAG in argv:  # `kselect <command> --debug`: the traceback of a bug
        argv = strip_debug(argv)
        os.environ["KSELECT_DEBUG"] = "1"
    flags, overrides = split_argv(argv)
    if any(f in ("-h", "--help") for f in flags):
        print(short_help(app.command, app.doc, app.config_dir, app.config_name))
        sys.exit(0)
    flags = ["--help" if f == "--help-all" else f for f in flags]
    asked = completion.wants(flags)
    if asked and not asked.startswith("query="):  # install/uninstall: kselect's script, for every command
        sys.exit(completion.shell_completion([asked], []))
    if asked:
        completion.for_hydra()
    return argv, flags, expand_home(overrides)


def _say_multirun_dir(command: str, status: _Status) -> None:
    """-m: where Hydra writes its jobs' records, once (sweep's own doc says where)."""
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and command != "sweep" and not status.said:
        status.said = True
        print(f"kselect {command} -m: Hydra writes each job's record (.hydra/) under {os.path.abspath(hc.sweep.dir)}/ "
              "(multirun/ in the current folder unless hydra.sweep.dir=<dir> is given)", file=sys.stderr)


def _run_reporting_compose_errors(app_main: Callable[[], None], app: _App, argv: list[str], overrides: list[str],
                                  status: _Status) -> None:
    """Run the Hydra app; an error composing its config is the command line's fault: one paragraph, exit 2, naming
    the near key where it is a typo."""
    ours = "HYDRA_FULL_ERROR" not in os.environ
    if ours:  # Hydra then raises instead of printing its own multi-paragraph report and exit 1
        os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app_main()
    except (HydraException, OmegaConfBaseException) as e:
        if not ours:
            raise
        report_error(KSelectError(with_hint(compose_error(e, overrides), overrides, app.config_dir, app.config_name)))
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - `python -m <module>` reaches no other backstop (kselect/cli.py's)
        if not ours or debug_enabled():
            raise
        if isinstance(e, (ValueError, TypeError)) and not status.started:  # raised by Hydra while composing,
            report_error(KSelectError(compose_error(e, overrides)))  # before any job ran: the command line's fault
            sys.exit(2)
        report_error(internal_error(e, ["kselect", app.command, *argv]))  # from a job: a bug
        sys.exit(INTERNAL_ERROR)
    finally:
        if ours:
            os.environ.pop("HYDRA_FULL_ERROR", None)


# A release (rules=vllm_0_34_0) is its base plus overlays (selector/config/releases.py): Hydra's own compose
# gets the chain spelled out, so `rules.<id>.enabled=false` finds the rule; the job sees the user's spelling.
_SPELLED: dict[str, str | None] = {}


def _spell_release(overrides: list[str], config_dir: Path) -> list[str]:
    """Only where the command line reaches into the rules (`rules.<id>...=`): nothing else needs the chain."""
    expand = hooks.release_expander  # set when selector/config/releases.py is imported (every config command)
    if expand is None or not any(o.lstrip("+~").startswith("rules.") for o in overrides):
        return overrides
    try:
        spelled, _ = expand(overrides, config_dir)
    except KSelectError:
        return overrides  # e.g. a sweep over overlay lists (-m overlay=[a],[b]): each job composes its own
    for k, o in enumerate(spelled):
        user = overrides[k] if k < len(overrides) else None
        if o != user:
            _SPELLED[o] = user
    return spelled


def spelled_release() -> bool:
    """Whether Hydra composed a release's chain spelled out (its config then lacks the release's name)."""
    return bool(_SPELLED)


def task_overrides() -> list[str]:
    """The overrides of this job as the user wrote them (without kselect's leading hydra.* ones, and with a
    release's chain as the user named it)."""
    out = []
    for o in HydraConfig.get().overrides.task:
        o = _SPELLED.get(o, o)
        if o is not None:
            out.append(o)
    return out


def compose_args(command: str, config_name: str, argv: list[str], renamed: dict[str, str] | None = None) -> DictConfig:
    """The config a command composes from `argv` (overrides only), in-process: what tests and
    notebooks call instead of spawning `kselect <command>`. Errors as KSelectError."""
    from hydra import compose, initialize  # noqa: PLC0415

    check_renamed(command, argv, renamed or {})
    try:
        with initialize(version_base="1.3", config_path=None):
            return compose(config_name=config_name, overrides=list(argv))
    except (HydraException, OmegaConfBaseException) as e:
        raise KSelectError(compose_error(e, list(argv))) from None
