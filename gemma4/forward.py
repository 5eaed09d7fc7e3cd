"""The one forward of the Gemma-4 decoder, over an ops object (gemma4/ops.py's TorchOps, gemma4/fused.py's
fused ops): the modules of gemma4/model.py hold the weights, this code the order of the maths.

Every layer starts from its normed input and hands the next its normed output: a layer ends in an add-norm
with the next layer's input norm (the last: the final norm), so the fused ops compute the residual add and the
next norm in one kernel. Each add-norm after a projection is one call, `linear_add_norm`, so the fused ops may
compute it in that projection's last program (gemma4/fused.py TAIL_NORMS); or at one row the projection after an
add-norm computes it in its prologue (`add_rms_norm` hands it a pending value, `ready` computes one nothing
projects). MoE blocks run their modules (router, experts, norms) under every ops. Where the ops prefetch (`ops.prefetches()`), `ops.prefetch` names the weights the next kernels read,
a hint that changes no result (gemma4/fused.py).
"""

from __future__ import annotations

import torch

from .config import FULL, SLIDING


def attention(ops, a, xn, cos, sin, ctx, hints=None) -> torch.Tensor:
    """One attention layer `a` (gemma4/model.py Attention) over normed input xn: q, K/V written, the group's backend;
    its output [T, heads x head dim], which the layer projects with the add-norm after it (`linear_add_norm`).
    hints: the layer's `prefetch_hints` where the ops prefetch this step."""
    t = xn.shape[0]
    g = ctx.groups[a.kind]
    k_cache, v_cache = g.cache.kv(a.kv_source)
    src = g.cache.layer_params(a.kv_source, a.window_left)
    q = ops.qkv(a, xn, cos, sin, ctx, g, src, k_cache.dtype)
    if hints:  # o_proj's weights: read after attention, which leaves the memory idle meanwhile
        ops.prefetch(*hints[0][0], limit=hints[0][1])
    return g.backend.forward(q, k_cache, v_cache, g.meta, src).reshape(t, a.n_heads * a.head_dim)


# The head of gate/up a prefetch brings to L2 beside o_proj and the add-norm before them (each half's first bytes: the
# first programs of the GEMV read both halves' first rows). The norm lasts ~2 us, ~6 MB at an H100's copy rate.
GATE_UP_HEAD_BYTES = 4 << 20


def prefetch_hints(model, i: int) -> tuple[tuple, tuple, tuple]:
    """Layer i's three prefetch hints, (weights, limit) each, in the order the forward gives them: o_proj while
    attention runs; the head of gate/up beside o_proj and the add-norm after it; after the MLP and its add-norm, what
    the kernels until the next layer's q/k/v projection read (small or latency-bound), and that projection's weights."""
    lay, layers = model.layers[i], model.layers
    after = (lay.per_layer_input_gate.weight, lay.per_layer_projection.weight) if lay.ple_dim else ()
    if i + 1 < len(layers):
        after += tuple(m.weight for m in layers[i + 1].self_attn.input_projections())
    return (((lay.self_attn.o_proj.weight,), None), ((lay.mlp.gate_proj.weight, lay.mlp.up_proj.weight),
            GATE_UP_HEAD_BYTES), (after, None))


def layer(ops, lay, x, xn, cos, sin, ctx, ple, next_norm, hints=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder layer `lay` (gemma4/model.py DecoderLayer): x its input, xn = input_layernorm(x). Returns (the
    layer's output, its norm with `next_norm`'s weight). hints: its `prefetch_hints` where the ops prefetch this step
    (None elsewhere: building them costs host time an eager step waits on)."""
    eps = lay.input_layernorm.eps
    o = attention(ops, lay.self_attn, xn, cos, sin, ctx, hints)
    if hints:
        ops.prefetch(*hints[1][0], limit=hints[1][1])
    h, z = ops.linear_add_norm(o, lay.self_attn.o_proj.weight, x, lay.post_attention_layernorm.weight, eps, None,
                               lay.pre_feedforward_layernorm.weight)
    post_ff = lay.post_feedforward_layernorm.weight
    # (scalar, next norm) of the MLP's add-norm: the layer's end, unless the per-layer-input block follows
    end = (lay.layer_scalar, next_norm) if not lay.ple_dim else (None, None)
    if lay.moe:  # the expert block also reads the pre-MLP residual h
        y = ops.mlp(lay.mlp, z)
        w, idx = lay.router(h)
        y2 = lay.experts(lay.pre_feedforward_layernorm_2(h), w, idx, ctx.static)
        y = lay.post_feedforward_layernorm_1(y) + lay.post_feedforward_layernorm_2(y2)
        if hints:
            ops.prefetch(*hints[2][0], limit=hints[2][1])
        h, hx = ops.add_rms_norm(y, h, post_ff, eps, *end)
    else:
        h, hx = ops.mlp_add_norm(lay.mlp, z, h, post_ff, eps, *end)
        if hints:
            ops.prefetch(*hints[2][0], limit=hints[2][1])
    if not lay.ple_dim:
        return h, hx
    return ops.ple_add_norm(lay, hx, ple, h, lay.post_per_layer_input_norm.weight, eps, lay.layer_scalar, next_norm)


def embed(model, ids: torch.Tensor, ops) -> torch.Tensor:
    """The scaled token embedding."""
    w = model.embed_tokens.weight
    return ops.embedding(ids, w, model.scale_in(w.dtype, model.args.embed_scale))


def per_layer_inputs(model, ids: torch.Tensor, emb: torch.Tensor, ops) -> torch.Tensor:
    """PLE_i = (norm(context part) + token part) * 2^-0.5, as [T, L, P]."""
    t, n, p = ids.shape[0], model.args.num_hidden_layers, model.ple_dim
    w = model.embed_tokens_per_layer.weight
    tok = ops.embedding(ids, w, model.scale_in(w.dtype, p**0.5))
    ctx = ops.linear(emb, model.per_layer_model_projection.weight, scale=model.args.hidden_size**-0.5)
    norm = model.per_layer_projection_norm
    return ops.add_rms_norm(ctx.view(t, n, p), tok.view(t, n, p), norm.weight, norm.eps, 2.0**-0.5)[0]


def rope_tables(model, positions: torch.Tensor, dtype: torch.dtype, ops) -> dict:
    """{kind: (cos, sin)} for both layer types from one table: the types' NeoX-doubled frequencies are one row
    (model.rope_inv_row), and each type's tables are column views of it."""
    cos, sin = ops.rope_tables(positions, model.rope_inv_row, dtype)
    ds = 2 * model.sliding_inv_freq.numel()
    return {SLIDING: (cos[:, :ds], sin[:, :ds]), FULL: (cos[:, ds:], sin[:, ds:])}


def forward(model, input_ids: torch.Tensor, ctx, ops) -> torch.Tensor:
    """input_ids [T] -> final-normed hidden states [T, hidden]."""
    with ops.launches(model, input_ids.shape[0]):
        ops.prepare(model)
        x = embed(model, input_ids, ops)
        ple = per_layer_inputs(model, input_ids, x, ops) if model.ple_dim else None
        rope = rope_tables(model, ctx.positions, x.dtype, ops)
        layers = model.layers
        xn = ops.rms_norm(x, layers[0].input_layernorm.weight, layers[0].input_layernorm.eps)
        hinted = ops.prefetches()
        for i, lay in enumerate(layers):
            cos, sin = rope[model.args.layer_types[i]]
            nxt = layers[i + 1].input_layernorm.weight if i + 1 < len(layers) else model.norm.weight
            x, xn = layer(ops, lay, x, xn, cos, sin, ctx, None if ple is None else ple[:, i], nxt,
                          prefetch_hints(model, i) if hinted else None)
        return ops.ready(xn)


def lm_head(model, hidden: torch.Tensor, ops) -> torch.Tensor:
    """The tied LM head and Gemma's logit softcap on the ops' projection (fused ops, one row: the GEMV with the
    softcap in its epilogue)."""
    cap = model.args.final_logit_softcapping
    with ops.launches(model, hidden.shape[0]):
        return ops.linear(hidden, model.embed_tokens.weight, softcap=cap or None)
