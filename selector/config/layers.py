"""A model's attention layers as the selector sees them: one `LayerSpec` per layer that keeps a cache
(vLLM's per-layer KV-cache spec), whichever way the model was described (a Gemma-4 preset, or a Hugging Face
config through selector/config/hf_arch.py). Pure data: no pydantic, no torch."""

from __future__ import annotations

import functools
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
    """A Gemma-4 preset's layers (selector/config/schema.py ModelConfig). The preset is frozen: its layers are
    kept per the fields they read (a matrix's objective search asks tens of thousands of times)."""
    dims = (m.head_dim, m.global_head_dim, m.num_key_value_heads, m.global_kv_heads(), m.sliding_window)
    return _gemma4_layers(tuple(m.resolved_layer_types()), m.num_hidden_layers - m.num_kv_shared_layers, dims)


@functools.lru_cache(maxsize=256)
def _gemma4_layers(types: tuple[str, ...], first_shared: int, dims: tuple[int, ...]) -> tuple[LayerSpec, ...]:
    """dims: head size and KV heads of sliding and of full layers, and the window."""
    head_dim, global_head_dim, kv_heads, global_kv_heads, window = dims
    last = {t: j for j, t in enumerate(types[:first_shared])}  # a shared layer reads the last earlier one of its type
    out = []
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        out.append(LayerSpec(
            index=i, kind="sliding_window" if sliding else "full_attention",
            head_size=head_dim if sliding else global_head_dim,
            num_kv_heads=kv_heads if sliding else global_kv_heads,
            window=window if sliding else None, reads_from=last[t] if i >= first_shared else None,
        ))
    return tuple(out)
