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
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from . import completion, hooks, suggest
from .cli_errors import (DEBUG_FLAG, INTERNAL_ERROR, check_printable, check_renamed, debug_enabled, internal_error,
                         report_error, strip_debug)
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

# An unquoted Hydra override value may not hold these (git revisions often do: HEAD~1, main^).
_NEEDS_QUOTES = re.compile(r"[~^!#&;<>`\"'\s]")


def _wants_output(argv: list[str]) -> bool:
    return any(a in ("-m", "--multirun") or a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for a in argv)


def _option_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's own flags with their values, the overrides) of a command line."""
    with_value = {"--cfg", "-c", "--package", "-p", "--info", "-i", "--config-path", "-cp", "--config-name", "-cn",
                  "--config-dir", "-cd", "--experimental-rerun"}  # fmt: skip
    flags, overrides, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-"):
            flags.append(a)
            if a in ("-sc", "--shell-completion") and i + 1 < len(argv):  # its value is `install=bash`
                flags.append(argv[i + 1])
                i += 1
            elif a in with_value and i + 1 < len(argv) and not argv[i + 1].startswith("-") and "=" not in argv[i + 1]:
                flags.append(argv[i + 1])
                i += 1
            elif a in ("--info", "-i"):  # its value is optional: name Hydra's default, or our overrides become it
                flags.append("all")
        else:
            overrides.append(a)
        i += 1
    return flags, overrides


_MODES = {"-r": "--run", "--run": "--run", "-m": "--multirun", "--multirun": "--multirun", "-c": "--cfg",
          "--cfg": "--cfg", "-i": "--info", "--info": "--info", "-sc": "--shell-completion",
          "--shell-completion": "--shell-completion"}


def expand_home(overrides: list[str]) -> list[str]:
    """`key=~/path` as a shell would have expanded it (Hydra's grammar refuses an unquoted `~`), quoted for Hydra."""
    out = []
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and not key.startswith("~") and (value == "~" or value.startswith("~/")):
            path = os.path.expanduser(value)
            quote = "'" if "'" not in path else '"'
            o = o if quote in path or "\\" in path else f"{key}={quote}{path}{quote}"
        out.append(o)
    return out


def check_one_mode(command: str, flags: list[str]) -> None:
    """Hydra runs one mode per command line; two (e.g. `-m --info`) is the user's error, said as one."""
    modes = sorted({_MODES[f] for f in flags if f in _MODES})
    if len(modes) > 1:
        raise KSelectError(f"kselect {command}: {' and '.join(modes)} together; allowed: one of --run, --multirun (-m), "
                           "--cfg, --info, --shell-completion per command line")


def check_no_code(overrides: list[str]) -> None:
    """No override names code to run: a `_target_` key (Hydra would instantiate it: a `+` adds one to any command's
    config) or a Hydra callback."""
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0]
        if "_target_" in key.split(".") or key.startswith("hydra.callbacks"):
            raise KSelectError(f"invalid config: {o}: {key} names code to run; allowed: no _target_ and no "
                               "hydra.callbacks from the command line (kselect's configs are data)")


def quote_values(overrides: list[str]) -> list[str]:
    """Quote the value of `key=value` where it is a git revision (`a.conf=git:HEAD~1`)."""
    out = []
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and value.startswith("git:") and _NEEDS_QUOTES.search(value):
            o = f"{key}='{value}'" if "'" not in value else o
        out.append(o)
    return out


def compose_error(e: BaseException, overrides: list[str] | None = None) -> str:
    """One paragraph for an error Hydra or OmegaConf raised while composing, naming the overrides
    it is about (those whose key the message names; else every override)."""
    parts = [str(e)]
    if e.__cause__ is not None and str(e.__cause__) not in parts[0]:
        parts.append(str(e.__cause__))
    text = " ".join(line.strip() for p in parts for line in p.split("Config search path")[0].splitlines() if line.strip())
    text = text.replace("See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details", "")
    text = text.strip() or e.__class__.__name__
    if any(w in text for w in ("mismatched input", "no viable alternative", "extraneous input", "token recognition")):
        text += ("; allowed: key=value overrides in Hydra's grammar (quote a value that holds = ( ) ~ $ or spaces: "
                 "key='value')")
    if "integer string conversion" in text:  # Python's int-digit limit: say which override, not 5000 digits twice
        limit = sys.get_int_max_str_digits()
        text = f"an integer of more than {limit} digits; allowed: a number within the key's bounds"
        overrides = [o for o in overrides if re.search(rf"\d{{{limit}}}", o)] or overrides
    if overrides:
        bad = [o for o in overrides if o.lstrip("+~").split("=")[0] in text] or list(overrides)
        return f"invalid config: {' '.join(map(_shown, bad))}: {text}"
    return "invalid config: " + text


def _shown(override: str) -> str:
    """An override as a message shows it: control characters escaped, a long one cut."""
    o = override if override.isprintable() else repr(override)
    return o if len(o) <= 120 else f"{o[:100]}...({len(o)} characters)"


def with_hint(message: str, overrides: list[str], config_dir: Path | None, config_name: str) -> str:
    """The message with the near key or option (suggest.py) in place of Hydra's offer to add the typo as a key."""
    hint = suggest.near(message, overrides, config_dir, config_name)
    if not hint:
        return message
    return re.sub(r"\s*To append to your config use \+\S+", "", message).rstrip(". ") + f"; {hint}"


def _added_hydra_keys(overrides: list[str]) -> list[tuple[str, str]]:
    """(override, dotted key) of each `+hydra.x=...` / `++hydra.x=...` (a key added to Hydra's own config)."""
    out = []
    for o in overrides:
        key = o.partition("=")[0]
        if key.startswith("+") and key.lstrip("+").startswith("hydra."):
            out.append((o, key.lstrip("+")))
    return out


def check_hydra_additions(overrides: list[str], lead: list[str], config_name: str, config_dir: Path | None) -> None:
    """Hydra adds any key under `hydra.` that a `+` names, and then never reads it (`+hydra.foo=1` runs as if
    it were not there). Refuse a key that Hydra's schema (its dataclasses, the chosen launcher's included)
    does not hold; free-form mappings (`hydra.job.env_set`, the logging configs) take any key. One compose of
    Hydra's config, only for a command line that adds such a key."""
    added = _added_hydra_keys(overrides)
    if not added:
        return
    import dataclasses  # noqa: PLC0415

    from hydra import compose, initialize, initialize_config_dir  # noqa: PLC0415

    hydra_args = [o for o in overrides if o.lstrip("+~").startswith("hydra")]
    init = initialize_config_dir(config_dir=str(config_dir), version_base="1.3") if config_dir else \
        initialize(version_base="1.3", config_path=None)
    try:
        with init:
            node = compose(config_name=config_name, overrides=[*lead, *hydra_args], return_hydra_config=True).hydra
    except (HydraException, OmegaConfBaseException, ValueError):
        return  # Hydra's own run reports these
    for text, key in added:
        cur, path = node, ["hydra"]
        for part in key.split(".")[1:]:
            schema = OmegaConf.get_type(cur) if isinstance(cur, DictConfig) else None
            if schema is None or not dataclasses.is_dataclass(schema):
                break  # a free-form mapping (or a value): any key
            fields = [f.name for f in dataclasses.fields(schema)]
            if part not in fields:
                raise KSelectError(f"invalid config: {text}: {'.'.join(path + [part])} is not a Hydra setting (Hydra would "
                                   f"add it and never read it); allowed keys under {'.'.join(path)}: {', '.join(fields)}")
            cur, path = cur[part], path + [part]


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
    argv, flags, overrides = _own_flags(command, doc, config_dir, config_name)
    # kselect's defaults lead, the user's overrides follow (the later value of a key wins); Hydra's
    # flags go first (argparse takes the overrides as one positional list).
    lead = [f"hydra.job.name=kselect_{command}", f"hydra/help={_register_help(command, doc)}"]
    if not _wants_output(argv):
        lead += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none"]
    try:
        check_printable(argv)
        check_no_code(overrides)
        check_renamed(command, overrides, renamed or {})
        check_one_mode(command, flags)
        check_group_values(overrides, config_dir)  # before Hydra: its ValueError for `model=null` names no key
        check_plugins(overrides)
        check_hydra_additions(overrides, lead, config_name, config_dir)
        hydra_overrides = _spell_release(overrides, config_dir) if config_name == "config" and config_dir else overrides
    except KSelectError as e:
        report_error(e)
        sys.exit(2)
    sys.argv[:] = [f"kselect {command}", *flags, *lead, *quote_values(hydra_overrides)]
    status = {"code": 0, "started": False}

    @hydra.main(config_path=str(config_dir) if config_dir else None, config_name=config_name, version_base="1.3")
    def _app(cfg: DictConfig) -> None:
        # The task composes other configs with Hydra's compose API (the matrix, a selection per
        # cell), which refuses to start while this app holds GlobalHydra: lend it, then restore.
        status["started"] = True
        _say_multirun_dir(command, status)
        gh = GlobalHydra.instance()
        held, gh.hydra = gh.hydra, None
        try:
            code = task(cfg)
        except KSelectError as e:
            report_error(e)
            code = 2
        except BrokenPipeError:
            code = 0
        except Exception as e:  # noqa: BLE001 - a bug: said here, before Hydra adds its own "Error executing job"
            if debug_enabled():
                raise
            report_error(internal_error(e, ["kselect", command, *argv]))
            code = INTERNAL_ERROR
        finally:
            gh.hydra = held
        status["code"] = max(status["code"], code or 0)
        if code and HydraConfig.get().mode == RunMode.RUN:
            sys.exit(code)

    _run_reporting_compose_errors(_app, overrides, status, (config_dir, config_name))
    sys.exit(status["code"])


def _own_flags(command: str, doc: str, config_dir: Path | None, config_name: str) -> tuple[list, list, list]:
    """sys.argv's kselect flags, handled before Hydra: --debug (Hydra's parser knows no such flag), a help page (Hydra's
    whole help is --help-all), completion install/uninstall. The rest: (argv, Hydra's flags, overrides)."""
    argv = sys.argv[1:]
    if DEBUG_FLAG in argv:  # `kselect <command> --debug`: the traceback of a bug
        argv = strip_debug(argv)
        os.environ["KSELECT_DEBUG"] = "1"
    flags, overrides = _option_args(argv)
    if any(f in ("-h", "--help") for f in flags):
        print(short_help(command, doc, config_dir, config_name))
        sys.exit(0)
    flags = ["--help" if f == "--help-all" else f for f in flags]
    asked = completion.wants(flags)
    if asked and not asked.startswith("query="):  # install/uninstall: kselect's script, for every command
        sys.exit(completion.shell_completion([asked], []))
    if asked:
        completion.for_hydra()
    return argv, flags, expand_home(overrides)


def _say_multirun_dir(command: str, status: dict) -> None:
    """-m: where Hydra writes its jobs' records, once (sweep's own doc says where)."""
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and command != "sweep" and not status.get("said"):
        status["said"] = True
        print(f"kselect {command} -m: Hydra writes each job's record (.hydra/) under {os.path.abspath(hc.sweep.dir)}/ "
              "(multirun/ in the current folder unless hydra.sweep.dir=<dir> is given)", file=sys.stderr)


def _run_reporting_compose_errors(app: Callable[[], None], overrides: list[str], status: dict,
                                  config: tuple[Path | None, str]) -> None:
    """Run the Hydra app; an error composing its config is the command line's fault: one paragraph, exit 2, naming
    the near key where it is a typo (config: the app's config dir and name)."""
    ours = "HYDRA_FULL_ERROR" not in os.environ
    if ours:  # Hydra then raises instead of printing its own multi-paragraph report and exit 1
        os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app()
    except (HydraException, OmegaConfBaseException) as e:
        if not ours:
            raise
        report_error(KSelectError(with_hint(compose_error(e, overrides), overrides, *config)))
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - `python -m <module>` reaches no other backstop (kselect/cli.py's)
        if not ours or debug_enabled():
            raise
        if isinstance(e, (ValueError, TypeError)) and not status["started"]:  # raised by Hydra while composing,
            report_error(KSelectError(compose_error(e, overrides)))  # before any job ran: the command line's fault
            sys.exit(2)
        report_error(internal_error(e, ["kselect", command, *argv]))  # from a job: a bug
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
