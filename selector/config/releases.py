"""A vLLM release is an overlay on the release before it, declared as data.

A rules option is either a whole rules file (`conf/rules/vllm_0_33_0.yaml`: `ruleset:` and
`rules:`), or a release manifest naming the release it builds on and the overlays that turn one
into the other:

    # conf/rules/vllm_0_34_0.yaml
    release:
      base: vllm_0_33_0            # a rules option: a whole file or another manifest
      overlays: [vllm_0_34_0]      # conf/overlay/<name>.yaml, applied in order on the base
    ruleset: {name: vllm_0_34_0, models: vLLM 0.34.0 (package registry release)}

`expand()` rewrites `rules=vllm_0_34_0 overlay=[...]` into `rules=<root file>` and
`overlay=[<each release's overlays, oldest first>, ...]` before Hydra composes, and `finish()`
puts the manifest's `ruleset:` back and moves the release overlays out of `overlays:` (they are
the release, not a user's choice) into `release.chain`. Each release overlay declares
`overlay_bases: {<name>: <base release>}` (checked here: it must be the manifest's base) and
`overlay_prs: {<name>: [upstream vLLM PR numbers behind its rules]}`. Nothing here names code:
manifests and overlays are data that guard.py checks like every other file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base import hooks
from ..base.errors import KSelectError
from ..base.files import SAFE_NAME, load_yaml

MAX_CHAIN = 32
MANIFEST_KEYS = {"release", "ruleset", "kernel_versions"}


def _rules_file(conf_dir: Path, name: str) -> dict | None:
    path = conf_dir / "rules" / f"{name}.yaml"
    if not path.is_file():
        return None  # Hydra names the missing option with what is available
    data = load_yaml(path, "a rules file")
    return data if isinstance(data, dict) else None


def manifest(conf_dir: Path | str, name: str) -> dict | None:
    """The `release:` declaration of rules option `name`, or None for a whole rules file."""
    data = _rules_file(Path(conf_dir), name)
    if not data or "release" not in data:
        return None
    where = f"conf/rules/{name}.yaml"
    extra = sorted(set(data) - MANIFEST_KEYS)
    if extra:
        raise KSelectError(
            f"invalid config: {where}: a release manifest holds {extra}; allowed: release, ruleset, kernel_versions "
            "(its rules live in the overlays it lists)"
        )
    rel = data["release"]
    if not isinstance(rel, dict) or set(rel) - {"base", "overlays"} or not isinstance(rel.get("base"), str):
        raise KSelectError(
            f"invalid config: {where}: release {rel!r}; allowed: {{base: <rules option>, overlays: [<overlay>, ...]}}"
        )
    ovs = rel.get("overlays") or []
    if not isinstance(ovs, list) or not ovs or not all(isinstance(o, str) and SAFE_NAME.fullmatch(o) for o in ovs):
        raise KSelectError(f"invalid config: {where}: release.overlays {ovs!r}; allowed: a non-empty list of overlay names")
    return {"name": name, "base": rel["base"], "overlays": list(ovs), "ruleset": data.get("ruleset"),
            "kernel_versions": data.get("kernel_versions")}


def chain(conf_dir: Path | str, name: str) -> tuple[str, list[dict]]:
    """(root rules file, manifests oldest first) of rules option `name`."""
    seen: list[dict] = []
    cur = name
    while (m := manifest(conf_dir, cur)) is not None:
        if len(seen) >= MAX_CHAIN or any(x["name"] == m["base"] for x in seen) or m["base"] == name:
            raise KSelectError(f"invalid config: rules={name}: its release chain loops or exceeds {MAX_CHAIN} releases")
        for ov in m["overlays"]:
            _check_overlay_base(Path(conf_dir), ov, m)
        seen.append(m)
        cur = m["base"]
    return cur, list(reversed(seen))


def _check_overlay_base(conf_dir: Path, ov: str, m: dict) -> None:
    path = conf_dir / "overlay" / f"{ov}.yaml"
    data = load_yaml(path, "an overlay file") if path.is_file() else None
    if not isinstance(data, dict):
        raise KSelectError(f"invalid config: conf/rules/{m['name']}.yaml: release overlay {ov!r} has no file conf/overlay/{ov}.yaml")
    base = (data.get("overlay_bases") or {}).get(ov)
    if base != m["base"]:
        raise KSelectError(
            f"invalid config: conf/overlay/{ov}.yaml: overlay_bases.{ov} is {base!r}, but release {m['name']} "
            f"applies it on {m['base']!r}; allowed: overlay_bases: {{{ov}: {m['base']}}}"
        )


def _rules_option(overrides: list[str], conf_dir: Path) -> tuple[int | None, str | None]:
    for i in range(len(overrides) - 1, -1, -1):
        o = overrides[i]
        if o.startswith("rules="):
            return i, o.split("=", 1)[1]
    return None, default_rules(conf_dir)


def _overlay_list(text: str) -> list[str] | None:
    """`[a,b]` / `a` / `[]` as a list; None for what only Hydra parses (sweeps)."""
    v = text.strip()
    if v.startswith("[") and v.endswith("]"):
        v = v[1:-1]
    names = [x.strip() for x in v.split(",") if x.strip()]
    return names if all(SAFE_NAME.fullmatch(n) for n in names) else None


def expand(overrides: list[str], conf_dir: Path | str) -> tuple[list[str], list[dict]]:
    """Overrides with a release manifest's chain spelled out, and the manifests (oldest first)."""
    conf_dir = Path(conf_dir)
    i, name = _rules_option(overrides, conf_dir)
    if not name or manifest(conf_dir, name) is None:
        return overrides, []
    root, manifests = chain(conf_dir, name)
    release_ovs = [ov for m in manifests for ov in m["overlays"]]
    out = list(overrides)
    if i is None:
        out.append(f"rules={root}")
    else:
        out[i] = f"rules={root}"
    j = next((k for k in range(len(out) - 1, -1, -1) if out[k].startswith("overlay=")), None)
    user = [] if j is None else _overlay_list(out[j].split("=", 1)[1])
    if user is None:
        raise KSelectError(f"invalid config: {out[j]}: with rules={name} (a release built from overlays) write one "
                           "overlay list, overlay=[a,b]")
    clash = sorted(set(user) & set(release_ovs))
    if clash:
        raise KSelectError(f"invalid config: overlay={user}: {', '.join(clash)} is part of rules={name} already; "
                           f"allowed: overlays that are not among its release overlays {release_ovs}")
    spelled = f"overlay=[{','.join(release_ovs + user)}]"
    if j is None:
        out.append(spelled)
    else:
        out[j] = spelled
    return out, manifests


def finish(data: dict, manifests: list[dict]) -> dict:
    """The composed dict of an expanded chain: the newest manifest's ruleset and kernel versions,
    the release overlays recorded in `release` and left out of the user's `overlays`."""
    if not manifests:
        return data
    newest = manifests[-1]
    out = dict(data)
    release_ovs = [ov for m in manifests for ov in m["overlays"]]
    out["overlays"] = {k: v for k, v in (data.get("overlays") or {}).items() if k not in release_ovs}
    root_ruleset = data.get("ruleset") or {}
    out["release"] = {
        "name": newest["name"],
        "chain": [str(root_ruleset.get("name", manifests[0]["base"]))] + [m["name"] for m in manifests],
        "overlays": {ov: m["base"] for m in manifests for ov in m["overlays"]},
        "prs": {ov: list((data.get("overlay_prs") or {}).get(ov, [])) for ov in release_ovs},
    }
    if newest.get("ruleset") is not None:
        out["ruleset"] = newest["ruleset"]
    for m in manifests:
        if m.get("kernel_versions") is not None:
            out["kernel_versions"] = m["kernel_versions"]
    return out


def is_unexpanded(data: Any) -> bool:
    """A manifest composed on its own (a Hydra app's cfg): it names a base but holds no rules."""
    return isinstance(data, dict) and isinstance(data.get("release"), dict) and "base" in data["release"]


# ---------------------------------------------------------------- the upgrade a diff reviews


def upgrade_steps(conf_a: Path | str, rules_a: str | None, conf_b: Path | str, rules_b: str | None) -> list[dict]:
    """The release overlays side b applies that side a does not (oldest first): each with its
    base, the upstream PRs it names and the rule ids it writes. Empty unless b's rules option is a
    release built on a's (e.g. a.rules=vllm_0_33_0 b.rules=vllm_0_34_0)."""
    if not rules_a or not rules_b:
        return []
    try:
        _, ma = chain(conf_a, rules_a)
        root_b, mb = chain(conf_b, rules_b)
    except KSelectError:
        return []
    have = {ov for m in ma for ov in m["overlays"]}
    chain_b = [root_b] + [m["name"] for m in mb]
    if rules_a not in chain_b:
        return []
    out = []
    for m in mb:
        for ov in m["overlays"]:
            if ov in have:
                continue
            path = Path(conf_b) / "overlay" / f"{ov}.yaml"
            data = load_yaml(path, "an overlay file") if path.is_file() else {}
            data = data if isinstance(data, dict) else {}
            out.append({"release": m["name"], "overlay": ov, "base": m["base"],
                        "prs": list((data.get("overlay_prs") or {}).get(ov, [])),
                        "rules": sorted((data.get("rules") or {})), "description": (data.get("overlays") or {}).get(ov, "")})
    return out


def render_steps(steps: list[dict], fmt: str) -> str:
    """The upgrade steps as the head of a review document (table / markdown; json: none)."""
    if not steps or fmt == "json":
        return ""
    lines = []
    for s in steps:
        prs = ", ".join(f"vllm-project/vllm#{n}" for n in s["prs"]) or "none verified by number"
        ids = ", ".join(f"`{r}`" if fmt == "markdown" else r for r in s["rules"]) or "none"
        if fmt == "markdown":
            lines.append(f"- **{s['release']}** = {s['base']} + overlay `{s['overlay']}` ({s['description']}); "
                         f"upstream PRs: {prs}; rule ids it writes: {ids}")
        else:
            lines.append(f"release {s['release']} = {s['base']} + overlay {s['overlay']} ({s['description']}); "
                         f"upstream PRs: {prs}; rule ids it writes: {ids}")
    head = "**Upgrade steps** (conf/overlay/<overlay>.yaml):" if fmt == "markdown" else "upgrade steps (conf/overlay/<overlay>.yaml):"
    return "\n".join([head, *lines, ""])


def default_rules(conf_dir: Path | str) -> str | None:
    """The rules option a conf tree composes by default (its config.yaml's defaults list)."""
    path = Path(conf_dir) / "config.yaml"
    data = load_yaml(path, "a kselect config.yaml") if path.is_file() else {}
    for entry in (data or {}).get("defaults", []) or []:
        if isinstance(entry, dict) and "rules" in entry:
            return str(entry["rules"])
    return None


hooks.release_expander = expand  # the Hydra apps spell a release's chain where overrides reach its rules
