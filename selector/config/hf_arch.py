"""A Hugging Face config.json -> the layers vLLM gives a cache, the way vLLM 0.34.0's model classes build them.

One generic derivation from the config's standard fields (layer count, heads, head_dim, `layer_types`,
`sliding_window` / `use_sliding_window` / `max_window_layers`, the MLA fields, hybrid patterns), and a table of what
each architecture does differently (conf/architectures/vllm_0_34_0.yaml, each row naming the vLLM model file it
mirrors; selector/config/hf_table.py). An architecture not in the table is refused by name. Only JSON values are
read (selector/config/hf_fields.py): no code from a config ever runs. A missing or wrong field is a ValueError
naming `model.hf_config.<field>` (exit 2 at the edges)."""

from __future__ import annotations

from ..config.hf_fields import MAX_LAYERS, TextFields, read_fields
from ..config.hf_fields import need as _need
from ..config.hf_state import mamba_state
from ..config.hf_table import Arch, table
from ..config.hf_wrap import language_model
from ..config.layers import LayerSpec
from ..config.vocab import FIXED_KINDS


def text_config(c: dict) -> tuple[dict, str]:
    """The text decoder's config (multimodal wrappers nest it) and its key path."""
    t = c.get("text_config")
    if t is None:
        return c, "model.hf_config"
    if not isinstance(t, dict):
        raise ValueError(f"model.hf_config.text_config: got {type(t).__name__}; allowed: an object")
    return t, "model.hf_config.text_config"


def need(f: TextFields, w: str, key: str, row: Arch | None = None) -> int:
    """A field the architecture needs (its name in the config where the row renames it)."""
    return _need(f, w, key, row.fields if row else None)


def heads(f: TextFields, w: str, row: Arch) -> tuple[int, int, int]:
    """(query heads, KV heads, head size): vLLM's num_key_value_heads (default: the query heads) and head_dim
    (default, or where the class ignores it: hidden_size / heads)."""
    q = need(f, w, "num_attention_heads", row)
    kv = f.num_key_value_heads or q
    if row.kv_heads == "falcon" and not f.new_decoder_architecture:
        kv = 1 if f.multi_query else q
    if q % kv:
        raise ValueError(f"{w}.num_attention_heads={q} is not a multiple of {w}.num_key_value_heads={kv}")
    head = f.head_dim if row.head_dim == "config" else None
    if row.head_dim == "qk":
        head = need(f, w, "qk_nope_head_dim", row) + need(f, w, "qk_rope_head_dim", row)
    if head is None:
        hidden = need(f, w, "hidden_size", row)
        if hidden % q:
            raise ValueError(f"{w}.hidden_size={hidden} is not a multiple of {w}.num_attention_heads={q} "
                             f"(no head_dim given)")
        head = hidden // q
    return q, kv, head


# ---------------------------------------------------------------- the layer pattern


def _every(f: TextFields, row: Arch, n: int) -> list[str] | None:
    if row.every is None:
        return None
    k = getattr(f, row.every.field, None) or row.every.default
    return [row.every.token if (i + 1) % k == 0 else row.every.rest for i in range(n)]


def _pattern_field(f: TextFields, row: Arch) -> str | None:
    """The first of the row's patterns the config states (None: the row's fallback applies)."""
    for p in row.pattern:
        if p in ("even_layers_slide", "none", "attn_layer_period"):
            return p
        v = getattr(f, p)
        if v is not None and v != []:
            return p
    return None


def tokens(f: TextFields, w: str, row: Arch) -> tuple[list[str] | None, str]:
    """Each layer's pattern token and the field it came from; (None, "") where the config states no pattern and
    the architecture's layers are all alike (the window decides)."""
    p = _pattern_field(f, row)
    if p == "hybrid_override_pattern":
        return list(f.hybrid_override_pattern), p
    if p == "layers_block_type" and f.num_hidden_layers is None:  # the list is the layer count (NemotronH)
        return list(f.layers_block_type), p
    n = need(f, w, "num_hidden_layers", row)
    if p in ("layer_types", "layers_block_type", "no_rope_layers"):
        v = [str(x) for x in getattr(f, p)]
        if len(v) != n:
            raise ValueError(f"{w}.{p}: want {n} entries (num_hidden_layers); got {len(v)}")
        return v, p
    if p == "attn_layer_period":
        period, offset = f.attn_layer_period or row.defaults.get("attn_layer_period", 8), f.attn_layer_offset
        offset = row.defaults.get("attn_layer_offset", 4) if offset is None else offset
        return ["attention" if i % period == offset else "mamba" for i in range(n)], p
    if p == "attn_layer_indices":
        return ["attention" if i in set(f.attn_layer_indices) else "mamba" for i in range(n)], p
    if p == "even_layers_slide":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)], p
    if p == "none":
        return ["full_attention"] * n, p
    made = _every(f, row, n)
    return (made, row.every.field) if made else (None, "")


def kinds_of(toks: list[str], where: str, row: Arch) -> list[str]:
    bad = [x for x in toks if x not in row.kinds]
    if bad:
        raise ValueError(f"{where}: got {bad[0]!r}; allowed: one of {sorted(row.kinds)} per layer")
    return [row.kinds[x] for x in toks]


# ---------------------------------------------------------------- windows


def _config_window(f: TextFields, n: int) -> tuple[list[str] | None, int | None]:
    """A config without layer types: transformers' Qwen2/Qwen3 fill them from use_sliding_window and
    max_window_layers (sliding from that layer on); use_sliding_window false drops the window."""
    if f.use_sliding_window is False or not f.sliding_window:
        return None, None
    if f.use_sliding_window and f.max_window_layers is not None and f.max_window_layers < n:
        return ["full_attention" if i < f.max_window_layers else "sliding_window" for i in range(n)], f.sliding_window
    return None, f.sliding_window


def windows(f: TextFields, w: str, row: Arch, kinds: list[str] | None) -> tuple[list[str], int | None]:
    """The layer kinds with vLLM's windows applied, and the window."""
    n = len(kinds) if kinds is not None else need(f, w, "num_hidden_layers", row)
    window = None if row.window == "none" else f.sliding_window
    if kinds is None:
        kinds, window = _config_window(f, n) if row.window != "none" else (None, None)
        kinds = kinds or ["sliding_window" if window else "full_attention"] * n
    att = [k for k in kinds if k in ("full_attention", "sliding_window")]
    partial = "sliding_window" in att and "full_attention" in att
    if partial and row.uniform_window:
        raise ValueError(f"{w}.max_window_layers: sliding window for some but not all layers; vLLM's {row.file} "
                         f"refuses it (\"Sliding window for some but all layers is not supported\"); allowed: "
                         f"max_window_layers = num_hidden_layers, or use_sliding_window false")
    if row.window == "global" and partial:  # no per-layer window: vLLM sets none when layer types mix
        kinds = ["full_attention" if k == "sliding_window" else k for k in kinds]
    if "sliding_window" in kinds and not window:
        raise ValueError(f"{w}.sliding_window is missing but the layer pattern has sliding layers; allowed: an "
                         f"integer 1..{1 << 24}")
    return kinds, (window + row.window_offset if window else None)


# ---------------------------------------------------------------- layers


def _sinks(f: TextFields, row: Arch, kind: str) -> bool:
    if row.sinks == "none" or (row.sinks == "sliding" and kind != "sliding_window"):
        return False
    if row.sinks_if is None:
        return True
    flag = getattr(f, row.sinks_if)
    if flag is None:
        return f.layer_types is not None if row.sinks_if_absent == "layer_types" else row.sinks_if_absent == "on"
    return flag


def _attention(f: TextFields, w: str, row: Arch, i: int, kind: str, window: int | None) -> LayerSpec:
    if row.attention == "mla":
        need(f, w, "num_attention_heads", row)  # the MLA priority lists read the query heads
        head = need(f, w, "kv_lora_rank", row) + need(f, w, "qk_rope_head_dim", row)
        return LayerSpec(i, "mla", head, 1, sparse=f.index_topk is not None)
    _, kv, head = heads(f, w, row)
    if kind == "chunked_local" and f.attention_chunk_size is None:
        kind = "full_attention"
    win = window if kind == "sliding_window" else f.attention_chunk_size if kind == "chunked_local" else None
    return LayerSpec(i, kind, head, kv, win, sinks=_sinks(f, row, kind))


def build(f: TextFields, w: str, row: Arch) -> list[LayerSpec]:
    toks, src = tokens(f, w, row)
    kinds = kinds_of(toks, f"{w}.{src}", row) if toks is not None else None
    kinds, window = windows(f, w, row, kinds)
    if len(kinds) > MAX_LAYERS:
        raise ValueError(f"{w}: {len(kinds)} layers; allowed: at most {MAX_LAYERS}")
    state = mamba_state(f, w, row) if {"mamba", "parallel"} & set(kinds) else ()
    out = []
    for i, k in enumerate(kinds):
        if k in ("full_attention", "sliding_window", "chunked_local", "parallel"):
            out.append(_attention(f, w, row, i, "full_attention" if k == "parallel" else k, window))
        if k in ("mamba", "parallel"):
            out.append(LayerSpec(i, "mamba", 0, 0, mamba_type=row.mamba, mamba_state=state))
    if row.attention == "mla" and f.index_topk is not None:  # each layer's indexer keeps its keys in a cache
        idx = need(f, w, "index_head_dim", row)  # of its own (DeepseekV32IndexerCache)
        out += [LayerSpec(x.index, "mla_indexer", idx, 1, mamba_type="deepseek_v32_indexer") for x in out if x.kind == "mla"]
    return out


def architecture(c: dict) -> str:
    archs = c.get("architectures")
    known = table().architectures
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ValueError(f"model.hf_config.architectures: got {str(archs)[:80]}; allowed: a list naming one of "
                         f"{sorted(known)}")
    if archs[0] not in known:
        raise ValueError(f"model.hf_config.architectures: {archs[0]!r} is not an architecture kselect models; allowed: "
                         f"{', '.join(sorted(known))}")
    return archs[0]


def layer_row(c: dict) -> tuple[str, Arch, dict[str, int]]:
    """(the architecture whose layers vLLM builds, its row, defaults for fields the text config omits): the config's
    own, or a multimodal wrapper's language model (selector/config/hf_wrap.py)."""
    arch = architecture(c)
    row = table().architectures[arch]
    return language_model(c, arch, row) if row.wraps is not None else (arch, row, {})


def fields_of(c: dict, row: Arch, defaults: dict[str, int] | None = None) -> tuple[TextFields, str]:
    t, w = text_config(c)
    f = read_fields(t, w, row.fields)
    # a wrapper's text-config defaults fill keys the config leaves out (an explicit null stays null, as transformers
    # keeps it: Mistral-Small-3.1's "sliding_window": null)
    absent = {k: v for k, v in (defaults or {}).items() if row.fields.get(k, k) not in t}
    unset = {k: v for k, v in {**row.defaults, **absent}.items() if getattr(f, k, 0) is None}
    return (f.model_copy(update=unset) if unset else f), w


def derive_layers(c: dict) -> tuple[str, str, tuple[LayerSpec, ...]]:
    """(architecture, family, layers) of a config.json object (a wrapper's: its language model's family and layers)."""
    arch = architecture(c)
    _, row, defaults = layer_row(c)
    f, w = fields_of(c, row, defaults)
    layers = tuple(build(f, w, row))
    if all(x.kind in FIXED_KINDS for x in layers) and not (row.attention_free and layers):
        raise ValueError(f"{w}: no attention layer (num_hidden_layers / the layer pattern); kselect selects attention")
    return arch, row.family, layers


def model_head_size(c: dict, layers: tuple[LayerSpec, ...]) -> int:
    """vLLM's ModelConfig.get_head_size: the MLA latent width, else head_dim (or hidden / heads)."""
    att = [x for x in layers if x.kind not in FIXED_KINDS]
    if not att:  # an attention-free (Mamba) model: no head
        return 0
    if att[0].kind == "mla":
        return att[0].head_size
    _, row, defaults = layer_row(c)
    f, w = fields_of(c, row, defaults)
    return heads(f, w, row)[2]


def query_heads(c: dict) -> int:
    """vLLM's get_num_attention_heads (the field under the architecture's name for it)."""
    _, row, defaults = layer_row(c)
    f, w = fields_of(c, row, defaults)
    if row.attention_free:
        return f.num_attention_heads or 0
    return need(f, w, "num_attention_heads", row)


# vLLM's derive_max_model_len_and_key (transformers_utils/model_arch_config_convertor.py): the smallest of these
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def max_model_len(c: dict) -> int:
    """The default max_model_len vLLM derives from the config (2048 where no key states one; model_max_length wins)."""
    t, w = text_config(c)
    lens = {k: t[k] for k in MAX_LEN_KEYS if isinstance(t.get(k), int) and not isinstance(t.get(k), bool)}
    if lens.get("model_max_length"):
        return lens["model_max_length"]
    return min(lens.values(), default=2048)
