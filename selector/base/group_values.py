"""Config groups take option names: `model=null` or `platform=3` is refused with the group and its options,
before Hydra raises a ValueError that names neither (the Hydra app calls this first)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from .errors import KSelectError
from .files import group_options


@functools.lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415

    return OverridesParser.create()


def check_group_values(overrides: Sequence[str], conf_dir: Path | str | None) -> None:
    """A config group (a folder of conf_dir, or one of Hydra's `hydra/...`) takes option names: refuse
    `model=null`, `platform=3`, `hydra/launcher=[1]` with the key and the options, before Hydra raises a
    ValueError that names neither. Overrides Hydra cannot parse are left to Hydra's own message."""
    from hydra.errors import HydraException  # noqa: PLC0415

    root = Path(conf_dir) if conf_dir is not None else None
    groups = {p.name for p in root.iterdir() if p.is_dir()} if root is not None and root.is_dir() else set()
    for text in overrides:
        try:
            [ov] = _parser().parse_overrides([text])
        except (HydraException, ValueError):
            continue
        key = ov.key_or_group
        if not (key in groups or key == "hydra" or "/" in key) or isinstance(ov.value(), dict):
            continue  # a value key (Hydra merges a dict given to a group as config, not as an option)
        value = ov.value()
        if ov.is_delete() and value is None:
            continue
        options = value.list if ov.is_sweep_override() and hasattr(value, "list") else [value]
        if ov.is_sweep_override() and not hasattr(value, "list"):
            options = [None]  # a range or interval: no option names
        bad = [v for opt in options for v in (opt if isinstance(opt, list) else [opt]) if not isinstance(v, str)]
        if bad:
            folder = root / key if root is not None and key in groups else None
            names = ", ".join(group_options(root, key)) if folder is not None else ""
            allowed = f"an option name of conf/{key}/ ({names})" if folder is not None else "an option name of that Hydra group"
            raise KSelectError(f"invalid config: {text}: {key} is a config group and takes an option name, "
                               f"not {bad[0]!r}; allowed: {allowed}")
