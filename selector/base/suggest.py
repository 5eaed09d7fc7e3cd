"""A mistyped key or option names the near one (`outptu=json` -> did you mean `output=json`?), where Hydra offers
only to add the typo as a new key (`+outptu=json`)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from .files import group_options

_UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'|Key '([^']+)' is not in struct")
_UNKNOWN_OPTION = re.compile(r"Could not (?:find|load) '([\w.-]+)/([^']*)'")


def _flatten(data, prefix: str = "", depth: int = 3) -> list[str]:
    """Dotted keys; an empty mapping (a place for the user's own keys: `attention.backend_per_kind: {}`) ends in '.'."""
    out = []
    for k, v in (data.items() if isinstance(data, dict) else []):
        key = f"{prefix}{k}"
        out.append(key + "." if v == {} else key)
        if depth > 1 and isinstance(v, dict):
            out += _flatten(v, key + ".", depth - 1)
    return out


def _chosen(overrides: list[str], group: str, default: str) -> str:
    for o in overrides:
        k, eq, v = o.partition("=")
        if eq and k == group and re.fullmatch(r"[\w.-]+", v):
            default = v
    return default


def known_keys(overrides: list[str], config_dir: Path | None, config_name: str) -> list[str]:
    """The dotted keys a command line can set: a conf tree's file (each group as the command line or the defaults
    list picks it), else the structured config of that name."""
    import yaml  # noqa: PLC0415

    own = Path(config_dir) / f"{config_name}.yaml" if config_dir else None
    if own is None or not own.is_file():
        from hydra.core.config_store import ConfigStore  # noqa: PLC0415
        from omegaconf import OmegaConf  # noqa: PLC0415

        try:
            return _flatten(OmegaConf.to_container(OmegaConf.create(ConfigStore.instance().load(f"{config_name}.yaml").node)))
        except Exception:  # noqa: BLE001 - no such stored config: nothing to suggest
            return []
    top = yaml.safe_load(own.read_text()) or {}
    keys = [k for k in top if k != "defaults"]
    for entry in top.get("defaults") or []:
        if isinstance(entry, dict):
            group, option = next(iter(entry.items()))
            keys.append(group)
            f = own.parent / group / f"{_chosen(overrides, group, str(option))}.yaml"
            if f.is_file() and f.stat().st_size < 1 << 20:
                keys += _flatten(yaml.safe_load(f.read_text()) or {}, f"{group}.")
    return keys


def near(text: str, overrides: list[str], config_dir: Path | None, config_name: str) -> str | None:
    """`did you mean <key>=<value>?` for the unknown key or option a Hydra error names, else None."""
    m = _UNKNOWN_KEY.search(text)
    if m:
        bad = (m[1] or m[2]).lstrip("+~")
        known = known_keys(overrides, config_dir, config_name)
        value = next((o.partition("=")[2] for o in overrides if o.lstrip("+~").partition("=")[0] == bad), "...")
        new_in = next((k for k in known if k.endswith(".") and bad.startswith(k) and "." not in bad[len(k):]), None)
        if new_in:  # Hydra adds a key to a mapping only with '+'
            return f"{new_in[:-1]} takes keys of your own, each added with '+': write +{bad}={value}"
        close = difflib.get_close_matches(bad, [k.rstrip(".") for k in known], n=1, cutoff=0.75)
        return f"did you mean {close[0]}={value}?" if close else None
    m = _UNKNOWN_OPTION.search(text)
    if m and config_dir is not None and (Path(config_dir) / m[1]).is_dir():
        options = group_options(config_dir, m[1])
        close = difflib.get_close_matches(m[2], options, n=1, cutoff=0.6)
        return f"did you mean {m[1]}={close[0]}?" if close else None
    return None
