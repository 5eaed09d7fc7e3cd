"""What a selection starts from: the named facts rules match on, the resolved KV dtype, and the
model's KV-cache layer groups (selector/rules/resolve.py runs the stages over them)."""

from __future__ import annotations

from ..rules.candidates import Group
from ..config.schema import KSelectConfig
from ..base.texts import layer_ranges
from ..config.vocab import FIXED_KINDS, GROUP_KINDS, resolve_kv_dtype


def base_facts(cfg: KSelectConfig) -> dict:
    p, m, kv, sd, pins = cfg.platform, cfg.model, cfg.kv_cache, cfg.spec_decode, cfg.attention
    cc = p.compute_capability
    heads = {x.head_size for x in m.layers() if x.kind not in FIXED_KINDS}
    f = {
        "platform.name": p.name,
        "platform.vendor": p.vendor,
        "platform.device": p.device,
        "platform.cc_major": cc[0] if cc else None,
        "platform.cc_minor": cc[1] if cc else None,
        "platform.gpu_model": p.gpu_model,
        "model.name": m.name,
        "model.architecture": m.hf_architecture,
        "model.family": m.family,
        "model.dtype": m.dtype,
        "model.multimodal": m.multimodal,
        "model.head_size": m.model_head_size(),
        "model.mixed_head_sizes": len(heads) > 1,
        "model.gqa": m.gqa(),
        "model.num_heads": m.num_query_heads(),
        "kv.dtype": kv.dtype,
        "kv.quantized": kv.quantized,
        "kv.scales": kv.scales,
        "kv.block_size": kv.block_size,
        "spec.method": sd.method,
        "pin.backend": None if pins.backend == "auto" else pins.backend,
        "pin.flash_attn_version": pins.flash_attn_version,
    }
    f.update({f"model.{k}": v for k, v in mla_fields(m).items()})
    tf = m.text_fields() if hasattr(m, "text_fields") else None
    f["model.softcap"] = bool(getattr(tf, "attn_logit_softcapping", None))
    for name, on in p.packages.model_dump().items():
        f[f"platform.packages.{name}"] = on
    return f


MLA_FIELDS = ("qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "index_topk")


def mla_fields(m) -> dict:
    """The MLA fields of the config vLLM's MLA backends read in supports_combination (null where absent or not a
    config.json model)."""
    f = m.text_fields() if hasattr(m, "text_fields") else None
    return {k: getattr(f, k, None) for k in MLA_FIELDS}


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
    """One group per layer kind (vocab.GROUP_KINDS order); a kind whose layers differ in shape is not modelled."""
    layers = m.layers()
    groups = []
    for kind in GROUP_KINDS:
        mine = [x for x in layers if x.kind == kind]
        if not mine:
            continue
        shapes = {(x.head_size, x.num_kv_heads, x.window, x.sinks, x.sparse, x.mamba_type, x.mamba_state) for x in mine}
        if len(shapes) > 1:
            raise ValueError(f"model {m.name}: its {kind} layers differ in shape ({len(shapes)} kinds of layer); "
                             f"kselect models one group per layer kind")
        x = mine[0]
        g = Group(kind=kind, layers=tuple(y.index for y in mine), head_size=x.head_size, num_kv_heads=x.num_kv_heads,
                  window=x.window if kind == "sliding_window" else None, sinks=x.sinks, sparse=x.sparse,
                  mamba_type=x.mamba_type, mamba_state=x.mamba_state)
        shared = [y.index for y in mine if y.reads_from is not None]
        if shared:
            producer = max(y.reads_from for y in mine if y.reads_from is not None)
            g.notes.append(f"layers {layer_ranges(shared)} reuse the cache of layer {producer} (KV sharing)")
        groups.append(g)
    return tuple(groups)


# ---------------------------------------------------------------- blocks, quant-query, descales
