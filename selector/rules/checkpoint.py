"""A quantized checkpoint's say over the KV cache (selector/config/hf_quant.py reads it): the trace entry where
`kv_cache=auto` took the checkpoint's dtype, vLLM's refusal of fp8_e5m2 for checkpoints that load FP8 KV
scales, and a warning where an explicit dtype makes vLLM set the checkpoint's KV quantization aside."""

from __future__ import annotations

from ..base.errors import SelectionError
from ..config.hf_quant import refuses_e5m2
from ..config.schema import KSelectConfig
from ..config.vocab import FIXED_KINDS, MODEL_GROUP, is_fp8
from ..outputs.records import Failure, SettingIgnored
from ..rules.facts import checkpoint_kv

TRACE_ID = "builtin.kv_cache_dtype_from_checkpoint"


def checkpoint_kv_checks(cfg: KSelectConfig, kinds: list[str], trace: list[str]) -> list[SettingIgnored]:
    """Raises SelectionError where vLLM refuses the KV dtype for this checkpoint; appends the trace entry
    where `auto` took the checkpoint's dtype; returns the warnings (strict=true refuses them)."""
    asked = cfg.kv_cache.dtype
    hc = getattr(cfg.model, "hf_config", None)
    if asked == "fp8_e5m2" and isinstance(hc, dict):
        attention = [k for k in kinds if k not in FIXED_KINDS]
        why = refuses_e5m2(hc, mla=bool(attention) and all(k == "mla" for k in attention))
        if why:
            raise SelectionError(Failure(code="checkpoint_kv_refused", model=cfg.model.name, kv_dtype=asked,
                                         reason=why))
    ckv = checkpoint_kv(cfg)
    if ckv is None or ckv.dtype is None:
        return []
    if asked == "auto":
        trace.append(TRACE_ID)
        return []
    if is_fp8(asked):
        return []
    return [SettingIgnored(group=MODEL_GROUP, setting=f"quantization_config {ckv.setting}",
                           reason=f"kv_cache={asked} is given explicitly and vLLM takes it over the checkpoint's "
                                  f"{ckv.dtype} KV cache (the checkpoint's KV scales go unused)")]


def kv_dtype_source(cfg: KSelectConfig) -> str | None:
    """Where the KV dtype came from when not from kv_cache.dtype itself: the checkpoint, for `auto`."""
    ckv = checkpoint_kv(cfg)
    if ckv is None or cfg.kv_cache.dtype != "auto":
        return None
    return ckv.source


def kv_scales(cfg: KSelectConfig) -> str:
    """A checkpoint with an FP8 KV cache carries calibrated K/V scales, which vLLM loads into an FP8 cache."""
    ckv = checkpoint_kv(cfg)
    return "calibrated" if ckv is not None and ckv.dtype is not None else cfg.kv_cache.scales
