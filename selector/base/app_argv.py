"""A Hydra app's command line before Hydra reads it (selector/base/hydra_app.py): Hydra's own flags told from the
overrides, and the overrides checked and spelled as Hydra's grammar takes them. Each check names the override and
what is allowed (exit 2), where Hydra would run something else than asked, or say it in pages."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..base.errors import KSelectError

# An unquoted Hydra override value may not hold these (git revisions often do: HEAD~1, main^).
_NEEDS_QUOTES = re.compile(r"[~^!#&;<>`\"'\s]")


def wants_output(argv: list[str]) -> bool:
    return any(a in ("-m", "--multirun") or a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for a in argv)


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's own flags with their values, the overrides) of a command line. Told apart here, not by Hydra's parser:
    the overrides are checked before Hydra runs, and its parser would take an override as --info's value."""
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
