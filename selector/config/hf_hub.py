"""`model.hf_config=<org>/<name>[@revision]`: a model's config.json from the local Hugging Face cache, read through
huggingface_hub's cache API (`try_to_load_from_cache`), which only looks at files: kselect never downloads. The cache
is the one huggingface_hub uses (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), laid out as
models--<org>--<name>/{refs/<branch>, snapshots/<commit>/config.json}."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# Hub repo names: letters, digits, '-', '_', '.', not starting with '.' or '-', no '..' or '--' (the hub refuses
# those); a revision is a branch, tag or commit of the same characters. fullmatch: no newline, no control character.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?P<org>{_PART})/(?P<name>{_PART})(?:@(?P<rev>[A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}))?")


@dataclass(frozen=True)
class HubId:
    repo: str  # <org>/<name>
    revision: str | None

    @property
    def spec(self) -> str:
        return self.repo + (f"@{self.revision}" if self.revision else "")


def looks_like_hub_id(value: str) -> bool:
    """A value meant as a hub id rather than a path: no path of that name exists, and it is not written as a
    path (absolute, home-relative or a .json file)."""
    if Path(value).expanduser().exists() or value.startswith(("/", "~")) or value.endswith(".json"):
        return False
    return value.count("/") == 1 or "@" in value or "\n" in value


def parse_hub_id(value: str) -> HubId:
    m = HUB_ID.fullmatch(value)
    if m is None or any(".." in p or "--" in p for p in (m["org"], m["name"], m["rev"] or "")):
        raise ValueError(f"model.hf_config={value!r} is neither a file or folder nor a Hugging Face model id; "
                         "allowed: a path to a config.json (or its folder), or <org>/<name>[@revision] "
                         "(letters, digits, '-', '_', '.'; e.g. Qwen/Qwen2.5-7B-Instruct)")
    return HubId(f"{m['org']}/{m['name']}", m["rev"])


def hub_cache_dir() -> Path:
    """The cache folder huggingface_hub reads (its own precedence of environment variables)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_file(hub: HubId, filename: str) -> Path | None:
    """The cached file of this repo and revision (default: the `main` ref), or None; never the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - tokenizers depends on huggingface_hub
        raise ValueError("model.hf_config=<org>/<name> needs the huggingface_hub package (pip install "
                         "huggingface_hub); allowed otherwise: a path to a config.json") from None
    hit = try_to_load_from_cache(hub.repo, filename, cache_dir=str(hub_cache_dir()), revision=hub.revision)
    return Path(hit) if isinstance(hit, str) else None


def hub_config_path(value: str) -> tuple[HubId, Path]:
    """The cached config.json of a hub id; ValueError naming the folder searched and how to fetch it."""
    hub = parse_hub_id(value)
    path = cached_file(hub, "config.json")
    if path is None:
        folder = hub_cache_dir() / ("models--" + hub.repo.replace("/", "--"))
        rev = f" --revision {shlex.quote(hub.revision)}" if hub.revision else ""
        raise ValueError(f"model.hf_config={value!r}: no config.json for {hub.spec} in the local Hugging Face cache "
                         f"(searched {folder}; kselect reads the cache only, never the network); allowed: a model "
                         f"in the cache (fetch its config with `huggingface-cli download {shlex.quote(hub.repo)} "
                         f"config.json{rev}` or `hf download {shlex.quote(hub.repo)} config.json{rev}`; set "
                         "HF_HUB_CACHE or HF_HOME for another cache) or a path to a config.json")
    return hub, path
