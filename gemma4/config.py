"""Model arguments for the Gemma-4 text decoder and its MTP drafter.

`Gemma4Args` mirrors the preset files in `conf/model/*.yaml` (field names follow Hugging Face's
`Gemma4TextConfig`): its fields, their checks and the shapes derived from them. Its config.json form (read from a
checkpoint, written for tests) is hf_config.py's; what both share is config_base.py's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from . import hf_config
from .config_base import FULL, MODEL_DTYPES, SLIDING, DrafterError, derive_layer_types, torch_dtype

__all__ = ["FULL", "MODEL_DTYPES", "SLIDING", "DrafterArgs", "DrafterError", "Gemma4Args", "derive_layer_types",
           "target_kv_layer", "torch_dtype"]


@dataclass
class Gemma4Args:
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    num_global_key_value_heads: int | None = None
    head_dim: int = 64
    global_head_dim: int = 128
    sliding_window: int = 16
    layer_types: list[str] = field(default_factory=list)
    final_logit_softcapping: float | None = 30.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 1024
    rope_theta_sliding: float = 10_000.0
    rope_theta_full: float = 1_000_000.0
    partial_rotary_factor_full: float = 0.25
    hidden_size_per_layer_input: int = 0
    vocab_size_per_layer_input: int = 0
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    attention_k_eq_v: bool = False
    enable_moe_block: bool = False
    num_experts: int | None = None
    top_k_experts: int | None = None
    moe_intermediate_size: int | None = None
    dtype: str = "float32"
    pad_token_id: int = 0
    eos_token_id: int = 1
    bos_token_id: int = 2
    name: str = "gemma4"

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = derive_layer_types(self.num_hidden_layers, 6)
        self.layer_types = list(self.layer_types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers"
            )
        bad = sorted(set(self.layer_types) - {SLIDING, FULL})
        if bad:
            raise ValueError(f"unknown layer types {bad}; expected {SLIDING!r} or {FULL!r}")
        self.layer_types[-1] = FULL  # as HF: the last layer is always full attention
        if self.enable_moe_block and not (self.num_experts and self.top_k_experts and self.moe_intermediate_size):
            raise ValueError("enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size")
        for i in range(self.num_hidden_layers):
            if self.num_attention_heads % self.num_kv_heads(i) != 0:
                raise ValueError(
                    f"layer {i}: num_attention_heads={self.num_attention_heads} is not a multiple of "
                    f"its {self.num_kv_heads(i)} kv heads"
                )
        # validate the sharing pattern early (raises on a producer-less type)
        self.kv_sharing_modes()

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_model_config(cls, d: dict[str, Any]) -> "Gemma4Args":
        """From a preset dict (conf/model/*.yaml, or the lead's `ModelConfig.model_dump()`)."""
        d = dict(d)
        arch = d.get("architecture", "gemma4")
        if arch not in (None, "gemma4"):
            raise ValueError(f"model architecture {arch!r} is not gemma4")
        layer_types = d.get("layer_types")
        if not layer_types:
            layer_types = derive_layer_types(d["num_hidden_layers"], d.get("full_attention_every") or 6)
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known and k != "layer_types" and v is not None}
        kw["layer_types"] = list(layer_types)
        for k in ("hidden_size_per_layer_input", "vocab_size_per_layer_input", "num_kv_shared_layers"):
            kw[k] = int(kw.get(k) or 0)
        return cls(**kw)

    @classmethod
    def from_hf_config(cls, d: dict[str, Any]) -> "Gemma4Args":
        """From a Hugging Face config.json dict (gemma4_text, or gemma4 with a text_config)."""
        return cls(**hf_config.text_args(d))

    def to_hf_config_dict(self) -> dict[str, Any]:
        """Kwargs for `transformers.Gemma4TextConfig` (and our config.json)."""
        return hf_config.text_config(self)

    def to_hf_text_config(self):
        from transformers import Gemma4TextConfig

        return Gemma4TextConfig(**self.to_hf_config_dict())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---------------------------------------------------------------- derived shapes
    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.hidden_size)

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    def layer_head_dim(self, layer: int) -> int:
        return self.head_dim if self.is_sliding(layer) else self.global_head_dim

    def num_kv_heads(self, layer: int) -> int:
        # as HF: the global kv-head override only applies with attention_k_eq_v
        if not self.is_sliding(layer) and self.attention_k_eq_v and self.num_global_key_value_heads:
            return self.num_global_key_value_heads
        return self.num_key_value_heads

    def k_eq_v(self, layer: int) -> bool:
        return self.attention_k_eq_v and not self.is_sliding(layer)

    @property
    def first_kv_shared_layer(self) -> int:
        return self.num_hidden_layers - self.num_kv_shared_layers

    def kv_sharing_modes(self) -> list[str | None]:
        """Per layer: None, 'store' (the last non-shared layer of its type) or 'reuse'."""
        n, first = self.num_hidden_layers, self.first_kv_shared_layer
        modes: list[str | None] = [None if i < first else "reuse" for i in range(n)]
        for t in set(self.layer_types):
            producers = [i for i in range(first) if self.layer_types[i] == t]
            if not producers:
                raise ValueError(
                    f"no non-shared {t} layer produces the KV that the shared {t} layers reuse "
                    f"(num_kv_shared_layers={self.num_kv_shared_layers})"
                )
            modes[producers[-1]] = "store"
        return modes

    def kv_source(self, layer: int) -> int:
        """The layer whose KV cache `layer` attends over (itself unless KV-shared)."""
        if layer < self.first_kv_shared_layer:
            return layer
        t = self.layer_types[layer]
        return max(i for i in range(self.first_kv_shared_layer) if self.layer_types[i] == t)

    def is_kv_shared(self, layer: int) -> bool:
        return layer >= self.first_kv_shared_layer

    def mlp_intermediate(self, layer: int) -> int:
        wide = self.use_double_wide_mlp and self.is_kv_shared(layer)
        return self.intermediate_size * (2 if wide else 1)

    def layers_of(self, kind: str) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == kind]


# ---------------------------------------------------------------------------- the MTP drafter's arguments


@dataclass
class DrafterArgs:
    """Shapes of the assistant. Head dims, KV heads and the window come from the target (the draft
    layers read its cache); the rest from the model preset's `drafter:` block or the HF config."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    layer_types: list[str]
    backbone_hidden_size: int
    vocab_size: int
    head_dim: int
    global_head_dim: int
    num_key_value_heads: int  # the target's KV heads of its sliding layers
    num_global_key_value_heads: int  # ... and of its full layers (what the draft layers read)
    sliding_window: int
    rms_norm_eps: float = 1e-6
    rope_theta_sliding: float = 10_000.0
    rope_theta_full: float = 1_000_000.0
    partial_rotary_factor_full: float = 0.25
    use_ordered_embeddings: bool = False
    num_centroids: int = 2048
    centroid_intermediate_top_k: int = 32
    attention_k_eq_v: bool = False  # mirrors the target (HF builds the draft layers' GQA from it)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.layer_types = list(self.layer_types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise DrafterError(
                f"drafter layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        bad = sorted(set(self.layer_types) - {SLIDING, FULL})
        if bad:
            raise DrafterError(f"drafter: unknown layer types {bad}; expected {SLIDING!r} or {FULL!r}")
        for t in set(self.layer_types):
            kv = self.kv_heads_of(t)
            if self.num_attention_heads % kv:
                raise DrafterError(
                    f"drafter num_attention_heads={self.num_attention_heads} is not a multiple of the "
                    f"target's {kv} KV heads of its {t} layers (the draft layers read that cache)")
        if self.use_ordered_embeddings:
            if self.vocab_size % self.num_centroids:
                raise DrafterError(
                    f"drafter: vocab_size={self.vocab_size} is not a multiple of num_centroids={self.num_centroids}")
            if not 0 < self.centroid_intermediate_top_k <= self.num_centroids:
                raise DrafterError(
                    f"drafter: centroid_intermediate_top_k={self.centroid_intermediate_top_k} must be in "
                    f"1..num_centroids={self.num_centroids}")

    # -------------------------------------------------------------- construction
    @classmethod
    def from_preset(cls, target: Gemma4Args, block: dict[str, Any] | Any) -> "DrafterArgs":
        """From a preset's `drafter:` block (a dict or the selector's pydantic `Drafter`)."""
        if block is None:
            raise DrafterError(f"model {target.name!r} has no drafter: block (needed for spec_decode=mtp)")
        if hasattr(block, "model_dump"):
            block = block.model_dump()
        b = dict(block)
        try:
            return cls(
                hidden_size=int(b["hidden_size"]), intermediate_size=int(b["intermediate_size"]),
                num_hidden_layers=int(b["num_hidden_layers"]), num_attention_heads=int(b["num_attention_heads"]),
                layer_types=list(b["layer_types"]), use_ordered_embeddings=bool(b.get("use_ordered_embeddings", False)),
                num_centroids=int(b.get("num_centroids", 2048)),
                centroid_intermediate_top_k=int(b.get("centroid_intermediate_top_k", 32)),
                sliding_window=int(b.get("sliding_window") or target.sliding_window),
                **_target_shapes(target))
        except KeyError as e:
            raise DrafterError(f"drafter: block is missing {e.args[0]!r}") from None

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], target: Gemma4Args | None = None) -> "DrafterArgs":
        """From an assistant `config.json` (model_type gemma4_assistant). With `target`, its shapes
        are checked against the target's (they must agree: the draft layers read its cache)."""
        args = cls(**hf_config.assistant_args(d))
        if target is not None:
            args.check_target(target)
        return args

    def check_target(self, target: Gemma4Args) -> None:
        """Raise DrafterError when this drafter cannot run on `target`'s cache and embeddings."""
        want = _target_shapes(target)
        errs = []
        for k in ("backbone_hidden_size", "vocab_size", "head_dim", "global_head_dim"):
            if getattr(self, k) != want[k]:
                errs.append(f"{k}={getattr(self, k)} but the target has {want[k]}")
        for t in set(self.layer_types):
            if self.kv_heads_of(t) != _kv_heads(target, t):
                errs.append(f"{t} KV heads {self.kv_heads_of(t)} but the target's {t} cache has {_kv_heads(target, t)}")
            if t not in target.layer_types:
                errs.append(f"a {t} draft layer but the target has no {t} layer to read")
        if errs:
            raise DrafterError("drafter does not fit the target model: " + "; ".join(errs))

    def to_hf_config_dict(self) -> dict[str, Any]:
        """An assistant config.json (model_type gemma4_assistant)."""
        return hf_config.assistant_config(self)

    def to_hf_config(self):
        """`transformers.Gemma4AssistantConfig` (tests)."""
        from transformers import Gemma4AssistantConfig, Gemma4TextConfig

        d = self.to_hf_config_dict()
        text = {k: v for k, v in d.pop("text_config").items() if k != "model_type"}
        d.pop("model_type"), d.pop("architectures"), d.pop("dtype")
        return Gemma4AssistantConfig(text_config=Gemma4TextConfig(**text), **d)

    # -------------------------------------------------------------- derived
    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    def layer_head_dim(self, layer: int) -> int:
        return self.head_dim if self.is_sliding(layer) else self.global_head_dim

    def kv_heads_of(self, kind: str) -> int:
        return self.num_key_value_heads if kind == SLIDING else self.num_global_key_value_heads

    def to_dict(self) -> dict:
        return asdict(self)


def _kv_heads(target: Gemma4Args, kind: str) -> int:
    return target.num_kv_heads(target.layers_of(kind)[0]) if kind in target.layer_types else 0


def _target_shapes(target: Gemma4Args) -> dict[str, Any]:
    return dict(
        backbone_hidden_size=target.hidden_size, vocab_size=target.vocab_size, head_dim=target.head_dim,
        global_head_dim=target.global_head_dim, num_key_value_heads=_kv_heads(target, SLIDING) or target.num_key_value_heads,
        num_global_key_value_heads=_kv_heads(target, FULL), rms_norm_eps=target.rms_norm_eps,
        rope_theta_sliding=target.rope_theta_sliding, rope_theta_full=target.rope_theta_full,
        partial_rotary_factor_full=target.partial_rotary_factor_full, attention_k_eq_v=target.attention_k_eq_v,
        dtype=target.dtype)


def target_kv_layer(target: Gemma4Args, kind: str) -> int:
    """The target layer whose cache draft layers of type `kind` read: the last non-KV-shared one."""
    layers = [i for i in range(target.first_kv_shared_layer) if target.layer_types[i] == kind]
    if not layers:
        raise DrafterError(f"the target has no non-shared {kind} layer for the drafter to read")
    return layers[-1]
