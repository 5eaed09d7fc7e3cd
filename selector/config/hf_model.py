"""`architecture: hf`: a model described by its Hugging Face config.json (a preset's inline copy, or
`model.hf_config=<path>` to a file or the folder holding it). kselect selects for it and explains; it does
not run it (the bundled Gemma-4 is the model that runs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import PrivateAttr, model_validator

from ..base.reading import FileError, check_lengths, is_special, load_json, short
from ..config.hf_arch import (derive_layers, fields_of, layer_row, max_model_len, model_head_size, query_heads,
                               text_config)
from ..config.hf_hub import HubId, cached_file, hub_config_path, looks_like_hub_id
from ..config.hf_quant import CheckpointKV, checkpoint_kv
from ..config.hf_table import table
from ..config.layers import LayerSpec
from ..config.schema_types import ModelDtype, Name, Strict
from ..config.vocab import DTYPE_OF_SHORT, FIXED_KINDS, MODEL_DTYPES

MAX_CONFIG_BYTES = 1 << 20  # published config.json files are a few KiB
_DTYPES = {**{d: d for d in MODEL_DTYPES}, **{s: d for s, d in DTYPE_OF_SHORT.items() if d in MODEL_DTYPES}}


def config_file(path: str) -> Path:
    """The config.json a model.hf_config path names (the file, or the one in the folder), absolute."""
    p = Path(path).expanduser()
    return (p / "config.json" if p.is_dir() else p).absolute()


def read_hf_config(path: str) -> dict:
    """A config.json (or a folder holding one) as an object, read through the checked reader
    (selector/base/reading.py: no special file, bounded size, depth and integers); errors name model.hf_config. A
    ModelOpt checkpoint's hf_quant_config.json beside it is merged in as vLLM's config loader merges it."""
    p = config_file(path)
    if not p.exists() and not p.is_symlink():  # a special file is the checked reader's to refuse, by name
        raise ValueError(f"model.hf_config={path!r}: no such file (or no config.json in that folder); allowed: a "
                         f"Hugging Face config.json or the folder holding it, or a model id <org>/<name> in the local "
                         f"Hugging Face cache")
    try:
        obj = _read_json(p, path)
        quant = p.parent / "hf_quant_config.json"
        return _with_quant_config(obj, quant if quant.is_file() else None, path)
    except FileError as e:  # a ValueError for pydantic: the validation error names the key
        raise ValueError(str(e)) from None


def _read_json(p: Path, given: str) -> dict:
    label = f"model.hf_config={short(given)}" + ("" if str(p) == given else f": {p.name}")
    expected = "a Hugging Face config.json or the folder holding it, or a model id <org>/<name> in the local cache"
    obj = load_json(p, label, expected, MAX_CONFIG_BYTES)
    if not isinstance(obj, dict):
        raise FileError(f"{label} holds a JSON {type(obj).__name__}; allowed: a JSON object ({expected})")
    return obj


def _with_quant_config(obj: dict, quant: Path | None, given: str) -> dict:
    """vLLM (vllm/transformers_utils/config.py) takes hf_quant_config.json as the quantization_config of a
    config.json that has none (ModelOpt 0.29 and older write it there)."""
    if quant is None or obj.get("quantization_config") is not None:
        return obj
    return {**obj, "quantization_config": _read_json(quant, given)}


def read_hub_config(value: str) -> tuple[HubId, dict]:
    """A hub id's config.json from the local cache (selector/config/hf_hub.py), hf_quant_config.json merged."""
    hub, p = hub_config_path(value)
    return hub, _with_quant_config(_read_json(p, value), cached_file(hub, "hf_quant_config.json"), value)


def dtype_fields(c: dict) -> list[tuple[str, str]]:
    """(key, value) of every dtype the config names (torch_dtype / dtype, the text config's first), each checked to
    be a dtype name: a wrong type is refused where it stands, also in a field an earlier one overrides."""
    t, w = text_config(c)
    found = [(f"{where}.{k}", d[k]) for where, d in ((w, t), ("model.hf_config", c)) for k in ("torch_dtype", "dtype")
             if d.get(k) is not None]
    for key, v in found:
        if not isinstance(v, str) or v not in _DTYPES:
            raise ValueError(f"{key}: got {short(v)}; allowed: a string, one of {sorted(_DTYPES)}")
    return found


def config_dtype(c: dict) -> str:
    """The dtype vLLM's `--dtype auto` takes from the config (the first of dtype_fields; float32 serves as bfloat16)."""
    found = dtype_fields(c)
    if not found:
        raise ValueError(f"{text_config(c)[1]}.torch_dtype is missing; set model.dtype (bfloat16 / float16 / float32)")
    v = found[0][1]
    return "bfloat16" if _DTYPES[v] == "float32" else _DTYPES[v]


class HFModelConfig(Strict):
    name: Name
    architecture: Literal["hf"]
    dtype: ModelDtype
    # a multimodal wrapper (conf/architectures wraps:) serving images; false: `--language-model-only` (no vision
    # tower); a text model has no vision to switch on
    multimodal: bool = False
    checkpoint: None = None
    drafter: None = None
    source: str | None = None  # where the published config.json is (presets)
    hub_id: str | None = None  # <org>/<name> when read from the local Hugging Face cache (what `vllm serve` takes)
    hub_revision: str | None = None  # the @revision given with it (None: the cache's `main` ref)
    hf_config: dict[str, Any]
    _arch: str = PrivateAttr()
    _family: str = PrivateAttr()
    _layers: tuple[LayerSpec, ...] = PrivateAttr()
    _ckv: CheckpointKV | None = PrivateAttr(default=None)

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
        if isinstance(hc, str):  # before any stat() of it (a 300-byte component is an OSError there)
            check_lengths(hc, f"model.hf_config={short(hc)}")
        if isinstance(hc, str) and looks_like_hub_id(hc):
            hub, data["hf_config"] = read_hub_config(hc)
            data.update(hub_id=hub.repo, hub_revision=hub.revision)
            data["source"] = data.get("source") or f"https://huggingface.co/{hub.repo}"
            if data.get("name") in (None, "hf"):
                data["name"] = _safe_name(hub.repo.split("/")[1])
            hc = data["hf_config"]
        elif isinstance(hc, str):
            data["hf_config"] = read_hf_config(hc)
            data["source"] = str(config_file(hc))  # this config.json, not a preset's published one
            if data.get("name") in (None, "hf"):
                data["name"] = _name_from(hc)
            hc = data["hf_config"]
        if isinstance(hc, dict):
            dtype_fields(hc)  # checked even where model.dtype is set: the file's own error
            if data.get("dtype", "auto") == "auto":
                data["dtype"] = config_dtype(hc)
        return data

    @model_validator(mode="after")
    def _derive(self) -> HFModelConfig:
        self._arch, self._family, self._layers = derive_layers(self.hf_config)
        if self.multimodal and table().architectures[self._arch].wraps is None:
            raise ValueError(f"model.multimodal: true, but {self._arch} is a text model (no vision tower kselect models); "
                             f"allowed: false, or true for a multimodal wrapper (docs/models.md)")
        # a compressed-tensors KV scheme is read (and checked) by attention layers only: MLA layers keep `auto`
        self._ckv = checkpoint_kv(self.hf_config, attention=any(x.kind not in FIXED_KINDS and x.kind != "mla"
                                                                 for x in self._layers))
        return self

    @property
    def checkpoint_kv(self) -> CheckpointKV | None:
        """What the checkpoint's quantization_config says about the KV cache (None: nothing)."""
        return self._ckv

    @property
    def repo_id(self) -> str | None:
        """`<org>/<repo>` (what `vllm serve` takes): the hub id read from the cache, or a huggingface.co source URL's."""
        if self.hub_id:
            return self.hub_id
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
    def mm_prefix(self) -> bool:
        """vLLM's is_mm_prefix_lm: a wrapper that sets it (Gemma-3) while serving images."""
        return self.multimodal and table().architectures[self._arch].mm_prefix

    @property
    def family(self) -> str:
        return self._family

    def layers(self) -> tuple[LayerSpec, ...]:
        return self._layers

    def model_head_size(self) -> int:
        return model_head_size(self.hf_config, self._layers)

    def text_fields(self):
        """The config's fields as the derivation read them (hf_fields.TextFields)."""
        return fields_of(self.hf_config, *layer_row(self.hf_config)[1:])[0]

    def kv_cache_dtype_ignored(self) -> str | None:
        """Why vLLM keeps this model's KV cache in the model dtype whatever --kv-cache-dtype says (None: it does not)."""
        row = layer_row(self.hf_config)[1]
        if not row.kv_dtype_ignored_unless_false:
            return None
        f = self.text_fields()
        on = [k for k in row.kv_dtype_ignored_unless_false if getattr(f, k) is not False]
        if not on:
            return None
        return (f"{row.file} builds its {'/'.join(on)} attention without the cache config: the KV cache keeps the "
                f"model dtype ({self.dtype})")

    def attention_free_block(self) -> int | None:
        """An attention-free model's state block (vLLM: max_model_len without prefix caching); None otherwise."""
        if not layer_row(self.hf_config)[1].attention_free:
            return None
        return max_model_len(self.hf_config)

    def kv_auto_dtype(self, cc_major: int | None) -> str | None:
        """The KV dtype the model's engine hook gives `--kv-cache-dtype auto` on this GPU family (None: the model's)."""
        return table().architectures[self._arch].kv_auto_by_cc_major.get(cc_major) if cc_major else None

    def num_query_heads(self) -> int:
        return query_heads(self.hf_config)

    def gqa(self) -> bool:
        heads = query_heads(self.hf_config) or 1
        att = [x for x in self._layers if x.kind not in FIXED_KINDS]
        return bool(att) and att[0].kind != "mla" and heads // max(1, att[0].num_kv_heads) > 1


def _name_from(path: str) -> str:
    """A model name from its config's path: the folder holding config.json (/models/Llama-3.1-8B -> Llama-3.1-8B)."""
    p = Path(path).expanduser()
    folder = p if p.is_dir() else p.parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):  # a hub cache snapshot
        return _safe_name(folder.parent.parent.name.split("--")[-1])  # models--Qwen--Qwen2.5-7B -> Qwen2.5-7B
    return _safe_name(folder.name or p.stem)


def _safe_name(base: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:64].lstrip(".-") or "model"
