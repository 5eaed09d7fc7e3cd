"""The model folders vLLM's chain loads: a config.json per preset (and a Gemma-4 preset's MTP drafter),
written from kselect's presets on kselect's side, so the worker in vLLM's venv needs no kselect.

A Gemma-4 preset (`architecture: gemma4`) is turned into Gemma4ForConditionalGeneration's config;
any other model's preset (`architecture: hf`, docs: /work/notes/design42.md) carries its published
config.json as `hf_config`, written as it is with the preset's `dtype` (no drafter)."""

from __future__ import annotations

import json
from pathlib import Path


def preset(model: str) -> dict:
    """conf/model/<model>.yaml as composed (the platform does not change a model preset)."""
    from kselect.selector.api import compose_raw

    return compose_raw([f"model={model}", "platform=sm90"])["model"]


def write_model_dirs(preset: dict, root: Path) -> tuple[Path, Path | None]:
    """config.json folders for the target and (Gemma-4 only) its MTP drafter."""
    if preset.get("architecture") == "hf":
        target = Path(root) / preset["name"]
        _write_json(target / "config.json", hf_config_json(preset))
        return target, None
    from kselect.gemma4.config import Gemma4Args

    try:  # main's gemma4 keeps DrafterArgs beside Gemma4Args (the drafter split, dad0b04)
        from kselect.gemma4.config import DrafterArgs
    except ImportError:
        from kselect.gemma4.drafter import DrafterArgs

    args = Gemma4Args.from_model_config(preset)
    text = args.to_hf_config_dict()
    dtype = text.pop("dtype")
    text.update(model_type="gemma4_text", use_bidirectional_attention="vision")
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": dtype,
           "text_config": text, "vision_config": {"model_type": "gemma4_vision"}, "tie_word_embeddings": True}
    target = Path(root) / preset["name"]
    _write_json(target / "config.json", cfg)
    drafter = None
    if preset.get("drafter"):
        d = DrafterArgs.from_preset(args, preset["drafter"]).to_hf_config_dict()
        drafter = Path(root) / f"{preset['name']}_assistant"
        _write_json(drafter / "config.json", d)
    return target, drafter


def _write_json(path: Path, obj) -> None:
    from kselect.selector.base.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1))


def hf_config_json(preset: dict) -> dict:
    """An `architecture: hf` preset's config.json: its `hf_config` as published, the dtype the preset's
    (`dtype` for transformers 5, and `torch_dtype` where the published config has that key)."""
    cfg = preset.get("hf_config")
    if isinstance(cfg, str):  # `model=hf model.hf_config=PATH`: a config.json, or the folder holding one
        path = Path(cfg).expanduser()
        cfg = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    if not isinstance(cfg, dict) or not cfg:
        from kselect.selector.base.errors import KSelectError

        raise KSelectError(f"model {preset.get('name')!r}: `architecture: hf` needs `hf_config` (the published "
                           "config.json as a mapping); the oracle writes it as the model folder's config.json.")
    cfg = json.loads(json.dumps(cfg))  # a plain copy (OmegaConf containers and tuples made JSON)
    if preset.get("dtype"):
        cfg["dtype"] = preset["dtype"]
        if "torch_dtype" in cfg:
            cfg["torch_dtype"] = preset["dtype"]
    return cfg
