"""The model's KV-cache layer groups, before selection: one per layer kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.texts import layer_ranges
from ..config.schema import KSelectConfig
from ..config.vocab import GROUP_KINDS


@dataclass
class Group:
    """A KV-cache layer group of the model, before selection."""

    kind: str
    layers: tuple[int, ...]
    head_size: int
    num_kv_heads: int
    window: int | None
    draft: bool = False
    reads_from: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)
    sinks: bool = False
    sparse: bool = False
    mamba_type: str | None = None
    mamba_state: tuple = ()


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
