"""A model's attention layers as the selector sees them: one `LayerSpec` per layer that keeps a cache
(vLLM's per-layer KV-cache spec), whichever way the model was described (a Gemma-4 preset, or a Hugging Face
config through selector/config/hf_arch.py). Pure data: no pydantic, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerSpec:
    index: int
    kind: str  # vocab.GROUP_KINDS
    head_size: int  # mla: the latent width (kv_lora_rank + qk_rope_head_dim); mamba: 0
    num_kv_heads: int  # mla: 1; mamba: 0
    window: int | None = None  # sliding window, or the attention chunk of a chunked_local layer
    sinks: bool = False
    sparse: bool = False  # sparse MLA (an indexer picks the keys)
    mamba_type: str | None = None  # mamba1 / mamba2 / gdn / linear / short_conv (vocab FACTS group.mamba_type)
    # a mamba layer's state per sequence: (shape, dtype) pairs, dtype `model` or a torch dtype name; vLLM
    # pads the attention block so one attention page covers this (platforms/interface.py _align_hybrid_block_size)
    mamba_state: tuple[tuple[tuple[int, ...], str], ...] = ()
    reads_from: int | None = None  # KV sharing: the layer whose cache this one reads


def gemma4_layers(m) -> tuple[LayerSpec, ...]:
    """A Gemma-4 preset's layers (selector/config/schema.py ModelConfig)."""
    out = []
    first_shared = m.num_hidden_layers - m.num_kv_shared_layers
    types = m.resolved_layer_types()
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        reads = None
        if i >= first_shared:
            reads = max(j for j in range(first_shared) if types[j] == t)
        out.append(LayerSpec(
            index=i, kind="sliding_window" if sliding else "full_attention",
            head_size=m.head_dim if sliding else m.global_head_dim,
            num_kv_heads=m.num_key_value_heads if sliding else m.global_kv_heads(),
            window=m.sliding_window if sliding else None, reads_from=reads,
        ))
    return tuple(out)
