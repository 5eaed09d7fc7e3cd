"""The model folders vLLM's chain loads: a config.json per Gemma-4 preset (and its MTP drafter),
written from kselect's presets on kselect's side, so the worker in vLLM's venv needs no kselect."""

from __future__ import annotations

import json
from pathlib import Path


def preset(model: str) -> dict:
    """conf/model/<model>.yaml as composed (the platform does not change a model preset)."""
    from kselect.selector.api import compose_raw

    return compose_raw([f"model={model}", "platform=sm90"])["model"]


def write_model_dirs(preset: dict, root: Path) -> tuple[Path, Path | None]:
    """config.json folders for the target (Gemma4ForConditionalGeneration) and its MTP drafter."""
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
