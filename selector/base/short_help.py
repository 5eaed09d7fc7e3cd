"""`kselect <command> --help`: a page, not Hydra's whole composed config (700 lines for a selection).

Usage (the command's summary and examples), its config groups with their options, and the keys used most, with
`--help-all` (Hydra's full help: every key) and `--hydra-help` (Hydra's flags) one flag away.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from .files import group_options

# The keys of conf/config.yaml's sections that a user sets most (the rest: --help-all, or --cfg job)
SECTION_KEYS = (
    ("model.checkpoint=<folder or hub id>", "the checkpoint vLLM loads (output=vllm names it)"),
    ("model.hf_config=<config.json or folder>", "with model=hf: any Hugging Face model"),
    ("kv_cache.dtype=auto|fp8|fp8_e4m3|fp8_e5m2", "the KV-cache dtype"),
    ("kv_cache.block_size=<tokens>", "a user block size (vLLM's --block-size)"),
    ("attention.backend=<BACKEND>", "a pin, validated alone (no fallback)"),
    ("attention.flash_attn_version=2|3|4", "a FlashAttention version pin"),
    ("platform.packages.<package>=false", "a kernel package missing (fa2 fa3 fa4 flashinfer triton)"),
)
MAX_USAGE_LINES = 20
_KEY_LINE = re.compile(r"^([a-z_]+):\s*([^#\n]*?)\s*(?:#\s*(.*))?$")


def usage(doc: str) -> list[str]:
    """The docstring's summary and examples: up to its second blank line (at most MAX_USAGE_LINES)."""
    out, blanks = [], 0
    for line in doc.strip().splitlines():
        if not line.strip():
            blanks += 1
            if blanks == 2:
                break
        out.append(line.rstrip())
    return out[:MAX_USAGE_LINES]


def groups(config_file: Path) -> list[str]:
    """`group: option, option, ...` per config group of the file's defaults list (its folder's YAML options)."""
    import yaml  # noqa: PLC0415

    defaults = (yaml.safe_load(config_file.read_text()) or {}).get("defaults") or []
    out = []
    for entry in defaults:
        name = next(iter(entry)) if isinstance(entry, dict) else None
        folder = config_file.parent / str(name)
        if name and folder.is_dir():
            opts = ", ".join(group_options(config_file.parent, str(name)))
            out += textwrap.wrap(f"{name}: {opts}", 116, initial_indent="  ", subsequent_indent="      ",
                                 break_on_hyphens=False)
    return out


def file_keys(config_file: Path) -> list[str]:
    """The top-level keys of a config file (not its defaults list), with their values and comments."""
    out = []
    for line in config_file.read_text().splitlines():
        m = _KEY_LINE.match(line)
        if m and m[1] != "defaults" and m[2] not in ("", "{}"):  # {}: filled by the config itself
            out.append(f"  {m[1]}={m[2]}".ljust(40) + (f" {m[3]}" if m[3] else ""))
    return out


def stored_keys(config_name: str) -> list[str]:
    """The keys of a structured config (ConfigStore), one level of nesting spelled out (a.conf=...)."""
    from hydra.core.config_store import ConfigStore  # noqa: PLC0415
    from omegaconf import OmegaConf  # noqa: PLC0415

    try:
        data = OmegaConf.to_container(OmegaConf.create(ConfigStore.instance().load(f"{config_name}.yaml").node),
                                      resolve=False)
    except Exception:  # noqa: BLE001 - not a stored config: no keys to show
        return []
    out = []
    for k, v in data.items():
        out += [f"  {k}.{sub}={x}" for sub, x in v.items()] if isinstance(v, dict) else [f"  {k}={v}"]
    return out


def short_help(command: str, doc: str, config_dir: Path | None, config_name: str) -> str:
    lines = usage(doc)
    own = Path(config_dir) / f"{config_name}.yaml" if config_dir else None
    g = groups(own) if own is not None and own.is_file() else []
    if g:
        lines += ["", "config groups (group=option):", *g]
    keys = file_keys(own) if own is not None and own.is_file() else stored_keys(config_name)
    if own is not None and own.is_file():
        keys += [f"  {k}".ljust(40) + f" {why}" for k, why in SECTION_KEYS]
    if keys:
        lines += ["", "most used keys (key=value):", *keys]
    lines += ["", f"every key: kselect {command} --help-all (or --cfg job); Hydra's own flags: kselect select --hydra-help"]
    return "\n".join(lines)
