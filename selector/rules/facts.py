"""What a selection starts from: the named facts rules match on, the resolved KV dtype, and the
model's KV-cache layer groups (selector/rules/resolve.py runs the stages over them)."""

from __future__ import annotations

from ..rules.candidates import Group
from ..config.schema import KSelectConfig
from ..base.texts import layer_ranges
from ..config.vocab import GROUP_KINDS, LAYER_TYPE, resolve_kv_dtype


def base_facts(cfg: KSelectConfig) -> dict:
    p, m, kv, sd, pins = cfg.platform, cfg.model, cfg.kv_cache, cfg.spec_decode, cfg.attention
    cc = p.compute_capability
    heads = {m.head_dim, m.global_head_dim}
    f = {
        "platform.name": p.name,
        "platform.vendor": p.vendor,
        "platform.device": p.device,
        "platform.cc_major": cc[0] if cc else None,
        "platform.cc_minor": cc[1] if cc else None,
        "platform.gpu_model": p.gpu_model,
        "model.name": m.name,
        "model.architecture": m.architecture,
        "model.dtype": m.dtype,
        "model.multimodal": m.multimodal,
        "model.head_size": max(heads),
        "model.mixed_head_sizes": len(heads) > 1,
        "model.gqa": m.num_key_value_heads > 0 and m.num_attention_heads // m.num_key_value_heads > 1,
        "kv.dtype": kv.dtype,
        "kv.quantized": kv.quantized,
        "kv.scales": kv.scales,
        "kv.block_size": kv.block_size,
        "spec.method": sd.method,
        "pin.backend": None if pins.backend == "auto" else pins.backend,
        "pin.flash_attn_version": pins.flash_attn_version,
    }
    for name, on in p.packages.model_dump().items():
        f[f"platform.packages.{name}"] = on
    return f


def resolved_kv_dtype(cfg: KSelectConfig) -> str:
    return resolve_kv_dtype(cfg.kv_cache.dtype, cfg.model.dtype)


def target_groups(cfg: KSelectConfig) -> list[Group]:
    """The target model's layer groups (cached per model section: matrix cells share them)."""
    hit = _GROUPS.get(id(cfg.model))
    if hit is None or hit[0] is not cfg.model:
        if len(_GROUPS) > 256:
            _GROUPS.clear()
        hit = _GROUPS[id(cfg.model)] = (cfg.model, _target_groups(cfg.model))
    return list(hit[1])


_GROUPS: dict[int, tuple] = {}


def _target_groups(m) -> tuple[Group, ...]:
    types = m.resolved_layer_types()
    first_shared = m.num_hidden_layers - m.num_kv_shared_layers
    groups = []
    for kind in GROUP_KINDS:
        layers = tuple(i for i, t in enumerate(types) if t == LAYER_TYPE[kind])
        if not layers:
            continue
        sliding = kind == "sliding_window"
        g = Group(
            kind=kind,
            layers=layers,
            head_size=m.head_dim if sliding else m.global_head_dim,
            num_kv_heads=m.num_key_value_heads if sliding else m.global_kv_heads(),
            window=m.sliding_window if sliding else None,
        )
        shared = [i for i in layers if i >= first_shared]
        producers = [i for i in layers if i < first_shared]
        if shared:
            g.notes.append(f"layers {layer_ranges(shared)} reuse the cache of layer {producers[-1]} (KV sharing)")
        groups.append(g)
    return tuple(groups)


# ---------------------------------------------------------------- blocks, quant-query, descales
