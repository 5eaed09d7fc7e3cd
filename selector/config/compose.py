"""Compose the Hydra config once and validate it (the facade selector/api.py re-exports these).

    cfg = compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"])
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from ..base import cache
from ..base.errors import ConfigError, KSelectError, format_validation_error
from ..base.files import group_options
from ..config.guard import check_conf_tree, check_overrides, conf_files
from ..config.schema import KSelectConfig
from ..config import releases

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # a checkout's conf/, or the wheel's kselect/conf

__all__ = ["CONF_DIR", "compose", "compose_key", "compose_raw", "validate"]


def compose_raw(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | str = CONF_DIR) -> dict:
    """Hydra compose -> a plain dict. Raises KSelectError naming the override or file.

    The conf tree and the overrides are checked first (guard.py): no code, no interpolations,
    no names outside conf/, bounded YAML. The result is kept in the user cache (base/cache.py) under
    the content of every conf file, the overrides and kselect's code: the same question composes once."""
    overrides = list(overrides)
    if not Path(conf_dir).is_dir():
        raise KSelectError(f"invalid config: conf directory {conf_dir} does not exist")
    files = conf_files(conf_dir)
    key = compose_key(conf_dir, files, overrides) if all(isinstance(o, str) for o in overrides) else None
    hit = cache.read_entry("compose", key) if key else None
    if isinstance(hit, dict):
        check_conf_tree(conf_dir, files)  # every file's check, each a hit under its content hash
        return hit
    check_overrides(overrides, conf_dir)
    check_conf_tree(conf_dir, files)
    data = _hydra_compose(overrides, Path(conf_dir))
    if key:
        cache.write_entry("compose", key, data)
    return data


def compose_key(conf_dir: Path | str, files: list[tuple[Path, str]], overrides: list[str]) -> str:
    """The cache key of a compose: every conf file's name and content hash, the overrides, kselect's code."""
    root = Path(conf_dir)
    return cache.digest("compose", cache.code_key(), *(f"{p.relative_to(root)}={h}" for p, h in files), "\0",
                        *overrides)


def _hydra_compose(overrides: list[str], conf_dir: Path) -> dict:
    from hydra import compose as hydra_compose  # noqa: PLC0415 - Hydra only when the cache misses
    from hydra import initialize_config_dir  # noqa: PLC0415
    from hydra.errors import HydraException  # noqa: PLC0415
    from omegaconf import OmegaConf  # noqa: PLC0415
    from omegaconf.errors import OmegaConfBaseException  # noqa: PLC0415

    user = list(overrides)
    overrides, manifests = releases.expand(overrides, conf_dir)  # a release = its base + overlays
    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError, AssertionError) as e:
        msg = _one_paragraph(e)
        missing = re.search(r"Could not load '(\w+)/([^']*)'", msg)
        if missing and (conf_dir / missing[1]).is_dir():
            opts = group_options(conf_dir, missing[1])
            msg += f" Available options in '{missing[1]}': {' '.join(opts)}"
        bad = [o for o in user if _named(o.lstrip("+~").split("=")[0].split("/")[0], msg)] or user  # as written
        raise KSelectError(f"invalid config: {' '.join(bad) or '<defaults>'}: {msg}") from None
    if not isinstance(data, dict):
        raise ConfigError("<root>", data, "a mapping")
    return releases.finish(data, manifests)


def validate(data: dict, overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | str = CONF_DIR) -> KSelectConfig:
    """Validate a composed dict; `platform.name: auto` is detected here, keeping the
    `platform.*` keys that `overrides` (the command line) or an overlay set."""
    if releases.is_unexpanded(data):  # a Hydra app composed a release manifest alone: compose its chain
        data = compose_raw(list(overrides), conf_dir)
    if isinstance(data.get("platform"), dict) and data["platform"].get("name") == "auto":
        from ..config.detect import auto_platform  # noqa: PLC0415 - torch only for auto

        data = {**data, "platform": auto_platform(data["platform"], overrides, Path(conf_dir))}
    try:
        return KSelectConfig.model_validate(data)
    except ValidationError as e:
        raise KSelectError(format_validation_error(e)) from None


def compose(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | str = CONF_DIR) -> KSelectConfig:
    return validate(compose_raw(overrides, conf_dir), overrides, conf_dir)


def _named(key: str, msg: str) -> bool:
    """Whether Hydra's message names this key as a word (`model` is not named by 'vllm_0_34_0_models')."""
    return bool(key) and re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", msg) is not None


def _one_paragraph(e: Exception) -> str:
    text = str(e).split("Config search path")[0]
    msg = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return msg or e.__class__.__name__
