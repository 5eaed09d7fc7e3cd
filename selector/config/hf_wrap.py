"""A multimodal wrapper's language model: the row of the architecture table (conf/architectures/vllm_0_34_0.yaml) whose
layers vLLM 0.34.0 builds for it, and the text config it reads. Gemma-3 and Qwen2-VL / Qwen2.5-VL name their language
model (`init_vllm_registered_model(..., architectures=[...])`); LLaVA and Mistral-3 build the one their text config
names (`architectures`, else its model_type: vLLM's VllmConfig.with_hf_config). The vision tower is no KV-cache
layer. A missing or unknown text model is a ValueError naming its key (exit 2 at the edges)."""

from __future__ import annotations

from ..base.reading import short
from ..config.hf_table import Arch, Wraps, table

W = "model.hf_config.text_config"


def text_of(c: dict, arch: str, wraps: Wraps) -> dict:
    """The wrapper's text config: `text_config`, or (where the config class allows it) the top level."""
    t = c.get("text_config")
    if t is None and wraps.text_config == "or_top_level":
        return c
    if t is None:
        raise ValueError(f"{W} is missing; allowed: an object, the language model's config ({arch} builds its "
                         f"language model from it)")
    if not isinstance(t, dict):
        raise ValueError(f"{W}: got {type(t).__name__}; allowed: an object")
    return t


def _named(t: dict, wraps: Wraps, arch: str) -> tuple[str, str]:
    """(the language model's architecture, the key it came from)."""
    if wraps.language_model:
        return wraps.language_model, f"model.hf_config.architectures ({arch} builds {wraps.language_model})"
    archs = t.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise ValueError(f"{W}.architectures: got {short(archs)}; allowed: a list naming the language model")
        return archs[0], f"{W}.architectures"
    mt = t.get("model_type", wraps.model_type)
    known = table().text_model_types
    if not isinstance(mt, str) or mt not in known:
        raise ValueError(f"{W}.model_type: got {short(mt)}; allowed: one of {sorted(known)} (the language models "
                         f"kselect models that {arch} can build)")
    return known[mt], f"{W}.model_type"


def language_model(c: dict, arch: str, row: Arch) -> tuple[str, Arch, dict[str, int]]:
    """(the language model's architecture, its row, the text config class's defaults for fields it omits)."""
    assert row.wraps is not None
    t = text_of(c, arch, row.wraps)
    name, key = _named(t, row.wraps, arch)
    rows = table().architectures
    lm = rows.get(name)
    if lm is None or lm.wraps is not None:
        text_rows = sorted(a for a, r in rows.items() if r.wraps is None)
        raise ValueError(f"{key}: {name!r} is not a language model kselect models; allowed: {', '.join(text_rows)}")
    mt = t.get("model_type", row.wraps.model_type)
    return name, lm, dict(table().text_defaults.get(mt, {})) if isinstance(mt, str) else {}
