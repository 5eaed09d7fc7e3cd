"""Tiny Gemma-4 configs (the fields of gemma4/config.py's Gemma4Args) and models shared by the gemma4 tests.

Every model is fp32 with deterministic random weights; norm weights, router scales and layer
scalars are perturbed around 1, and the final softcap is small (0.5) so that a `(1 + w)` norm,
a dropped scalar or a wrong cap shows in the logits. HF twins carry the same weights.
"""

from __future__ import annotations

import copy

import torch

from kselect.gemma4.config import FULL as F
from kselect.gemma4.config import SLIDING as S
from kselect.gemma4.config import Gemma4Args

BASE = dict(
    vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, global_head_dim=128, layer_types=[S, S, F, S, S, F], sliding_window=8,
    final_logit_softcapping=0.5, max_position_embeddings=256,
)
EDGE = dict(hidden_size_per_layer_input=32, vocab_size_per_layer_input=512, num_kv_shared_layers=2,
            use_double_wide_mlp=True)
LARGE = dict(attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True, num_experts=8,
             top_k_experts=2, moe_intermediate_size=64)
CONFIGS = {"edge": {**BASE, **EDGE}, "large": {**BASE, **LARGE}, "all": {**BASE, **EDGE, **LARGE}}

# Logits relative tolerance against HF eager fp32 (max |a-b| / max |b|).
HF_RTOL = 1e-4
EMBED_STD = 0.03  # raw logits ~ N(0, 0.5^2): the 0.5 softcap is neither identity nor saturated


def make_args(name: str, **over) -> Gemma4Args:
    return Gemma4Args(**{**CONFIGS[name], **over})


def hf_twin(model):
    """An HF Gemma4ForCausalLM (fp32, eager attention) with `model`'s weights."""
    from transformers import AutoModelForCausalLM

    cfg = model.args.to_hf_text_config()
    hf = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    res = hf.load_state_dict({f"model.{k}": v for k, v in model.state_dict().items()}, strict=False)
    assert res.unexpected_keys == [] and res.missing_keys == ["lm_head.weight"], res
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()  # tied
    return hf


def hf_logits(hf, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0].float()


def simple_selection(args: Gemma4Args, *, backend: str = "TORCH_REFERENCE", kv_block_size=16,
                     kv_cache_dtype: str = "auto", kv_scales: str = "unit", kernel_block_size=None):
    """A hand-made selection: the same backend for every group. `kv_block_size` / `kernel_block_size`
    may be given per layer type ({sliding_attention: 16, ...})."""
    from kselect.gemma4.kv_cache import LAYER_TYPE_TO_GROUP
    from kselect.selector.outputs.selection import GroupSelection, Selection

    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    kv_name = names[args.torch_dtype] if kv_cache_dtype in (None, "auto") else kv_cache_dtype
    fp8 = kv_name.startswith("fp8")
    groups = []
    for kind in (S, F):
        layers = args.layers_of(kind)
        if not layers:
            continue
        bs = kv_block_size[kind] if isinstance(kv_block_size, dict) else kv_block_size
        kb = kernel_block_size[kind] if isinstance(kernel_block_size, dict) else kernel_block_size
        groups.append(GroupSelection(
            kind=LAYER_TYPE_TO_GROUP[kind], layers=tuple(layers),
            reads_from=tuple(sorted({args.kv_source(i) for i in layers if args.is_kv_shared(i)})),
            head_size=args.layer_head_dim(layers[0]), num_kv_heads=args.num_kv_heads(layers[0]),
            sliding_window=args.sliding_window if kind == S else None, backend=backend, flash_attn_version=None,
            kernel_block_size=kb or bs, kv_block_size=bs, kv_cache_dtype=kv_name, quant_query=False,
            descale="k_v" if fp8 else "none", kv_scales=kv_scales if fp8 else "none", mm_prefix=False))
    bs0 = min(g.kv_block_size for g in groups)
    return Selection(environment={"platform": "manual", "model": args.name}, block_size=bs0, groups=tuple(groups))
