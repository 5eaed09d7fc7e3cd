"""`output=vllm`: the `vllm serve` command that makes a vLLM release run this selection (the selection's own
release, rules=vllm_X_Y_Z; VLLM_RULES for a rules option that is no release).

vLLM's arguments cannot say everything a selection says (one flash_attn_version for all
layers, one cache block, no per-group kernel block), and some pins change what vLLM does
beyond the pinned field (Gemma4Config forces FA4 only while the backend is unset or
FLASH_ATTN; `--block-size` marks the block as user-set and changes vLLM's block logic). So
the export proposes the fewest arguments, from the user's own pins upward, and keeps the
first set that kselect's model of that release (`rules=vllm_X_Y_Z`) resolves to the same
per-group backend, FA version, kernel block and KV block. If none does, it refuses in one
line naming what vLLM would run instead: it never prints a command that silently runs
something else.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from pathlib import Path

from ..base.errors import KSelectError, SelectionError
from ..config.compose import CONF_DIR, compose_raw
from ..evidence.evidence import Evidence
from ..rules.resolve import resolve_rules
from ..rules.rulebook import rulebook
from ..export.render import group_name, per_phase_losses
from ..config.schema import AttentionPins, KSelectConfig
from ..outputs.selection import GroupSelection, Selection

VLLM_RULES = "vllm_0_33_0"  # the vLLM an export of a non-release rules option (post_pr52987) targets
RELEASE = re.compile(r"^vllm_(\d+)_(\d+)_(\d+)$")


def target_rules(cfg: KSelectConfig) -> str:
    """The release whose vLLM the command is for: the selection's own release (rules=vllm_0_34_0
    exports for vLLM 0.34.0), else VLLM_RULES."""
    return cfg.ruleset.name if RELEASE.match(cfg.ruleset.name) else VLLM_RULES


def release_label(rules: str) -> str:
    m = RELEASE.match(rules)
    return f"vLLM {m[1]}.{m[2]}.{m[3]}" if m else rules


class ExportError(KSelectError):
    """The selection has no vLLM command that reproduces it."""


def vllm_command(cfg: KSelectConfig, sel: Selection, conf_dir: Path | str | None = None) -> str:
    e = sel.environment
    if e["device"] == "cpu":
        raise ExportError(
            "output=vllm: kselect's CPU selection runs TORCH_REFERENCE, which is not a vLLM backend "
            "(vLLM's CPU backend is CPU_ATTN, a different kernel); there is no vLLM command that runs this selection"
        )
    want = vllm_kernels(sel)
    _check_backends(want)
    targets = [g for g in want.groups if not g.draft]
    drafts = [g for g in want.groups if g.draft]
    target = target_rules(cfg)
    ref = _vllm_book(conf_dir, target)
    tried: list[str] = []
    for pins in _candidate_pins(cfg, targets):
        got = _resolve_as_vllm(cfg, ref, pins, want.environment.get("user_block_size"))
        if isinstance(got, str):
            tried.append(f"{_describe(pins)}: {got}")
            continue
        diff = _differences(want, got)
        if not diff:
            return _command(cfg, want, pins, drafts, chosen=sel)
        tried.append(f"{_describe(pins)}: {diff}")
    raise ExportError(
        f"output=vllm: {release_label(target)} cannot express this selection (rules={e.get('rules')}); "
        f"with the closest arguments it would run something else: {tried[-1] if tried else 'nothing to try'}"
    )


def vllm_kernels(sel: Selection) -> Selection:
    """What the export runs: the selection itself, or where it decodes on a build vLLM does not ship (an objective's
    choice, vocab.ALT_BUILDS), the objective's best choice made of vLLM's own kernels. vLLM then runs only kernels
    it ships: a measured gain of another build is stated beside the command, never exported under vLLM's name."""
    builds = [g for g in sel.groups if g.build and not g.draft]
    if not builds:
        return sel
    if sel.vllm_kernels is None:
        raise ExportError(
            "output=vllm: the objective's choice runs " + ", ".join(f"{group_name(g)} {g.label}" for g in builds)
            + ", a build vLLM does not ship, and no choice made of vLLM's own kernels is verified and measured here; "
              "export objective=vllm (vLLM's own selection) instead")
    return sel.vllm_kernels


# ---------------------------------------------------------------- candidates


def _candidate_pins(cfg: KSelectConfig, targets: list[GroupSelection]):
    """Pins to try, fewest first: the user's own, then explicit backends, then a FA version."""
    user = cfg.attention
    yield user
    backends = {g.kind: g.backend for g in targets}
    if len(set(backends.values())) == 1:
        explicit = AttentionPins(backend=next(iter(backends.values())))
    else:
        explicit = AttentionPins(backend_per_kind=backends)
    # FA version: the smallest-head FlashAttention group's version (vLLM upgrades larger heads
    # per layer, e.g. 3 at head 256 and 4 at head 512 on SM90; 4 at 256 and 2 at 512 on SM100)
    fa = sorted((g.head_size, g.flash_attn_version) for g in targets if g.flash_attn_version)
    versions = [None] + ([fa[0][1]] if fa else [])
    seen = set()
    for base in (user, explicit):
        for v in versions:
            p = base.model_copy(update={"flash_attn_version": v if v is not None else base.flash_attn_version})
            key = p.model_dump_json()
            if key not in seen:
                seen.add(key)
                yield p


def _describe(p: AttentionPins) -> str:
    d = _attention_config(p)
    return shlex.join(_flag_json("--attention-config", d)) if d else "no attention pins"


# ---------------------------------------------------------------- kselect's model of a vLLM release


@functools.lru_cache(maxsize=8)
def _vllm_book(conf_dir, rules: str = VLLM_RULES) -> dict:
    """The rules and capabilities of a vLLM release as the conf tree holds them (composed once per tree)."""
    raw = compose_raw([f"rules={rules}", "overlay=[]"], conf_dir or CONF_DIR)
    return {k: raw[k] for k in ("rules", "capabilities", "ruleset", "release", "kernel_versions") if k in raw}


def _resolve_as_vllm(cfg: KSelectConfig, ref: dict, pins: AttentionPins, block: int | None = None) -> Selection | str:
    """block: the selection's own --block-size (a user's, or one an objective chose for a prefill kernel)."""
    data = cfg.model_dump(by_alias=True)
    data.update(ref)
    data["overlays"], data["overlay_bases"], data["overlay_relations"], data["overlay_prs"] = {}, {}, {}, {}
    data.setdefault("release", None)
    if "release" not in ref:
        data["release"] = None
    data["attention"] = pins.model_dump()
    data["objective"] = {**data["objective"], "name": "vllm"}  # vLLM runs its own rules: no measured choice
    if block is not None:
        data["kv_cache"] = {**data["kv_cache"], "block_size": block}
    if data["spec_decode"]["copy_target_kv_scales"] is not None:
        data["spec_decode"]["copy_target_kv_scales"] = None  # vLLM has no such switch
    try:
        ref_cfg = KSelectConfig.model_validate(data)
        return resolve_rules(ref_cfg, rulebook(ref_cfg), Evidence.none())  # vLLM reads no measurements
    except SelectionError as err:
        return f"vLLM refuses: {str(err).splitlines()[0]}"
    except ValueError as err:  # a pin the vLLM rules do not know
        return f"not a {release_label(str((ref.get('ruleset') or {}).get('name')))} configuration: {str(err).splitlines()[0]}"


def _differences(want: Selection, got: Selection) -> str:
    out = []
    for a in want.groups:
        b = next((g for g in got.groups if g.kind == a.kind and g.draft == a.draft), None)
        if b is None:
            out.append(f"no {group_name(a)} group")
            continue
        for field, label in (("backend", "backend"), ("flash_attn_version", "FA"), ("kernel_block_size", "kernel block"),
                             ("draft_shared_kernel_block", "draft-shared kernel block"),
                             ("kv_block_size", "KV block")):  # fmt: skip
            x, y = getattr(a, field), getattr(b, field)
            if x != y:
                out.append(f"{group_name(a)} {label} {y} instead of {x}")
    return "; ".join(out)


# ---------------------------------------------------------------- the command


def _attention_config(p: AttentionPins) -> dict:
    d: dict = {}
    if p.backend != "auto":
        d["backend"] = p.backend
    if p.backend_per_kind:
        d["backend_per_kind"] = dict(p.backend_per_kind)
    if p.flash_attn_version is not None:
        d["flash_attn_version"] = p.flash_attn_version
    return d


# kselect's own kernels, which no vLLM release has (vLLM's CPU backend is CPU_ATTN, another kernel)
NOT_IN_VLLM = {"TORCH_REFERENCE": "kselect's PyTorch reference kernel, kernels/reference.py"}


def model_argument(cfg: KSelectConfig) -> tuple[str, list[str]]:
    """What `vllm serve` loads, and a note where kselect cannot name it: the checkpoint the user gave, the folder
    of the config.json given by path (model.hf_config=<folder>), the preset's Hugging Face repository."""
    if cfg.model.checkpoint:
        return cfg.model.checkpoint, []
    folder = getattr(cfg.model, "local_folder", None)
    if folder:
        return folder, []
    repo = getattr(cfg.model, "repo_id", None)
    if repo:
        return repo, []
    return "<model>", ["# <model>: the model's folder or Hugging Face id (set model.checkpoint=... to name it here)"]


def _needs_language_model_only(cfg: KSelectConfig, e: dict) -> bool:
    """vLLM skips a multimodal architecture's vision tower only when told; a text-only model has none to skip."""
    if e["multimodal"]:
        return False
    if cfg.model.architecture == "gemma4":  # Gemma4ForConditionalGeneration: always built with its vision tower
        return True
    return isinstance(getattr(cfg.model, "hf_config", None), dict) and "vision_config" in cfg.model.hf_config


def _check_backends(sel: Selection) -> None:
    lacking = sorted({(g.backend, NOT_IN_VLLM[g.backend]) for g in sel.groups if g.backend in NOT_IN_VLLM})
    if lacking:
        names = ", ".join(f"{b} ({why})" for b, why in lacking)
        raise ExportError(f"output=vllm: the selection runs {names}; vLLM has no such backend, so there is no vLLM "
                          "command that runs this selection (pin one of vLLM's backends, e.g. attention.backend=TRITON_ATTN)")


def _flag_json(flag: str, value: dict) -> list[str]:
    return [flag, json.dumps(value, separators=(",", ":"))]


def vllm_argv(cfg: KSelectConfig, sel: Selection, pins: AttentionPins, drafts: list[GroupSelection]) -> tuple[list[str], list[str]]:
    """(the argv of the `vllm serve` command, comment lines about it) for a selection vLLM reproduces with `pins`."""
    e = sel.environment
    model, notes = model_argument(cfg)
    argv = ["vllm", "serve", model, "--dtype", e["dtype"], "--kv-cache-dtype", e["kv_cache_dtype"]]
    if e["user_block_size"] is not None:  # only a user's: --block-size changes vLLM's block logic
        argv += ["--block-size", str(e["user_block_size"])]
    ac = _attention_config(pins)
    if ac:
        argv += _flag_json("--attention-config", ac)
    if e["spec_decode"] == "mtp":
        if not cfg.model.drafter.checkpoint:
            raise ExportError(
                f"output=vllm: model.drafter.checkpoint is not set for model {cfg.model.name!r}; vLLM needs the assistant "
                "checkpoint as the draft `model` (without one it drafts with the target and refuses method 'mtp')"
            )
        spec = {"method": "mtp", "model": cfg.model.drafter.checkpoint, "num_speculative_tokens": e["num_speculative_tokens"]}
        argv += _flag_json("--speculative-config", spec)
        # vLLM's Gemma-4 speculator builds the drafter from the target's attention config and never reads
        # speculative_config.attention_backend: the draft backends are not an argument, they follow from the ones
        # above (checked like the target's, in _differences)
        notes.append("# MTP draft layers (selected by vLLM from the arguments above): " + ", ".join(
            f"{group_name(g)} {g.backend}{f' FA{g.flash_attn_version}' if g.flash_attn_version else ''}" for g in drafts))
        if cfg.spec_decode.copy_target_kv_scales is False and cfg.kv_cache.quantized:
            notes.append("# NOTE: vLLM's drafts always copy the target's K/V scales (no switch to keep unit scales)")
    if _needs_language_model_only(cfg, e):
        argv.append("--language-model-only")
    if any("\0" in a for a in argv):
        raise ExportError("output=vllm: an argument holds a NUL character, which no command line can pass; "
                          "allowed: model.checkpoint and model.drafter.checkpoint without NUL")
    return argv, notes


def _comment(line: str) -> str:
    """A note as one inert shell comment line: a control character (a newline would end the comment) is escaped."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m[0]):02x}", line)


def _command(cfg: KSelectConfig, sel: Selection, pins: AttentionPins, drafts: list[GroupSelection],
             chosen: Selection | None = None) -> str:
    """sel: what the command runs; chosen: the selection asked for (its measured figures and warnings are noted).
    One shell line, every argument `shlex`-quoted (the JSON of a flag is one argument): `shlex.split` of the text
    (comments dropped) is the argv, and pasting it into a shell runs nothing else."""
    chosen = chosen or sel
    argv, notes = vllm_argv(cfg, sel, pins, drafts)
    # what vLLM cannot express and what was measured, then warnings: shell comments after the command, still
    # copy-pasteable, never lost
    notes += [f"# NOTE {group_name(g)}: vLLM runs kernel block {g.draft_shared_kernel_block} (not {g.kernel_block_size}) on the "
              "target layers sharing a KV-cache group with the MTP draft layers" for g in sel.groups if g.draft_shared_kernel_block]
    notes += [f"# NOT EXPRESSIBLE in vLLM: {n}" for n in per_phase_losses(chosen, sel)]
    notes += [f"# measured {group_name(g)}: {m.text()}" for g in chosen.groups if not g.draft for m in g.measured]
    notes += [f"# WARNING {group_name(g)}: {w.text}" for g in chosen.groups for w in g.warnings]
    notes += [f"# WARNING: {w.text}" for w in chosen.warnings]
    return shlex.join(argv) + "".join("\n" + _comment(n) for n in notes)
