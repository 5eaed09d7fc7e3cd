"""`architecture: hf`: a model described by its Hugging Face config.json (a preset's inline copy, or
`model.hf_config=<path>` to a file or the folder holding it). kselect selects for it and explains; it does
not run it (the bundled Gemma-4 is the model that runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import PrivateAttr, model_validator

from ..config.hf_arch import derive_layers, model_head_size, text_config
from ..config.layers import LayerSpec
from ..config.schema_types import ModelDtype, Name, Strict
from ..config.vocab import FIXED_KINDS

MAX_CONFIG_BYTES = 1 << 20  # published config.json files are a few KiB
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def config_file(path: str) -> Path:
    """The config.json a model.hf_config path names (the file, or the one in the folder), absolute."""
    p = Path(path).expanduser()
    return (p / "config.json" if p.is_dir() else p).absolute()


def read_hf_config(path: str) -> dict:
    """A config.json (or a folder holding one) as an object; ValueError naming model.hf_config otherwise."""
    p = config_file(path)
    if not p.is_file():
        raise ValueError(f"model.hf_config={path!r}: no such file (or no config.json in that folder); allowed: a "
                         f"Hugging Face config.json or the folder holding it")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"model.hf_config={path!r}: {p.stat().st_size} bytes; allowed: at most {MAX_CONFIG_BYTES}")
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"model.hf_config={path!r} is not JSON ({e}); allowed: a Hugging Face config.json") from None
    if not isinstance(obj, dict):
        raise ValueError(f"model.hf_config={path!r} holds a {type(obj).__name__}; allowed: a JSON object")
    return obj


def config_dtype(c: dict) -> str:
    """The dtype vLLM's `--dtype auto` takes from the config (torch_dtype / dtype; float32 serves as bfloat16)."""
    t, w = text_config(c)
    v = t.get("torch_dtype", t.get("dtype", c.get("torch_dtype", c.get("dtype"))))
    if v is None:
        raise ValueError(f"{w}.torch_dtype is missing; set model.dtype (bfloat16 / float16 / float32)")
    if v not in _DTYPES:
        raise ValueError(f"{w}.torch_dtype: got {v!r}; allowed: {sorted(_DTYPES)}")
    return "bfloat16" if _DTYPES[v] == "float32" else _DTYPES[v]


class HFModelConfig(Strict):
    name: Name
    architecture: Literal["hf"]
    dtype: ModelDtype
    multimodal: Literal[False] = False  # vision mode is Gemma-4's; other models select as language models
    checkpoint: None = None
    drafter: None = None
    source: str | None = None  # where the published config.json is (presets)
    hf_config: dict[str, Any]
    _arch: str = PrivateAttr()
    _family: str = PrivateAttr()
    _layers: tuple[LayerSpec, ...] = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _load(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        hc = data.get("hf_config")
        if hc is None:
            raise ValueError("model.hf_config is not set; allowed: a path to a Hugging Face config.json (or its "
                             "folder), e.g. model=hf model.hf_config=/models/Llama-3.1-8B/config.json")
        if isinstance(hc, str):
            data["hf_config"] = read_hf_config(hc)
            data["source"] = str(config_file(hc))  # this config.json, not a preset's published one
            if data.get("name") in (None, "hf"):
                data["name"] = _name_from(hc)
            hc = data["hf_config"]
        if data.get("dtype", "auto") == "auto" and isinstance(hc, dict):
            data["dtype"] = config_dtype(hc)
        return data

    @model_validator(mode="after")
    def _derive(self) -> HFModelConfig:
        self._arch, self._family, self._layers = derive_layers(self.hf_config)
        return self

    @property
    def repo_id(self) -> str | None:
        """`<org>/<repo>` of a huggingface.co source URL (what `vllm serve` takes), else None."""
        m = re.match(r"https://huggingface\.co/([\w.-]+/[\w.-]+)(/|$)", self.source or "")
        return m[1] if m else None

    @property
    def local_folder(self) -> str | None:
        """The folder of a config.json given by path (what `vllm serve` loads), else None."""
        p = Path(self.source or "")
        return str(p.parent) if p.is_absolute() and p.name == "config.json" else None

    @property
    def hf_architecture(self) -> str:
        return self._arch

    @property
    def family(self) -> str:
        return self._family

    def layers(self) -> tuple[LayerSpec, ...]:
        return self._layers

    def model_head_size(self) -> int:
        return model_head_size(self.hf_config, self._layers)

    def num_query_heads(self) -> int:
        t, _ = text_config(self.hf_config)
        return t["num_attention_heads"]

    def gqa(self) -> bool:
        t, _ = text_config(self.hf_config)
        heads = t.get("num_attention_heads") or 1
        att = [x for x in self._layers if x.kind not in FIXED_KINDS]
        return att[0].kind != "mla" and heads // max(1, att[0].num_kv_heads) > 1


def _name_from(path: str) -> str:
    """A model name from its config's path: the folder holding config.json (/models/Llama-3.1-8B -> Llama-3.1-8B)."""
    p = Path(path).expanduser()
    base = p.name if p.is_dir() else p.parent.name or p.stem
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:64].lstrip(".-") or "model"
