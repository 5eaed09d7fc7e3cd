"""The Gemma-4 MTP drafter (HF `Gemma4AssistantForCausalLM`): Q-only layers over the target's KV cache.

One draft step, for every sequence of a batch at once (one query token per sequence):

    x   = [target_embed(token) * sqrt(backbone_hidden), target hidden state]   # 2*backbone wide
    h   = pre_projection(x)                                                    # drafter width
    h   = 4 Gemma-4 decoder layers whose attention is Q-only (q_proj, q_norm, o_proj): K and V
          are read from the paged cache of the *last non-KV-shared target layer of the same type*
    h   = norm(h)
    logits       = lm_head(h)        (E2B/E4B: the centroid-masked head, `use_ordered_embeddings`)
    next hidden  = post_projection(h) (backbone width: the hidden-state input of the next step)

There is no final-logit softcap in the drafter (HF's assistant applies none). Every draft step of
a round sits at the same position, the *constant draft position* P = the position of the last
token the target produced (not yet in its cache), and the drafter never writes KV.

Attention window of the draft layers (gemma4/draft_kv.py `DraftKVBinding`): the query is RoPE'd at P and attends the
target's cache without a causal offset: full layers see every cached position, sliding layers the
last `sliding_window + 1` cached positions (HF's bidirectional rule |q - kv| <= W on the kv axis
flipped to the past). With one query per sequence this is FlashAttention's bottom-right aligned
mask over `seqused_k` cached tokens with `window_left = W`, so the draft runs on every backend the
selector may pick for the draft group (FA has no `q_positions`), and the mask never depends on
where the query's RoPE position is.

Parameter names are HF's (`model.layers.{i}.self_attn.q_proj.weight`, `pre_projection.weight`,
`masked_embedding.centroids.weight`, ...), so gemma4/checkpoint.py `load_drafter` reads assistant checkpoints directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..backends.base import AttentionBackend, AttentionMetadata, LayerParams
from .config import FULL, SLIDING, DrafterArgs
from .layers import MLP, RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq


# ---------------------------------------------------------------------------- what a draft step reads


@dataclass
@dataclass
class DraftGroupStep:
    """What the draft layers of one type read in one draft step."""

    k_cache: torch.Tensor  # the target producer layer's paged K (same tensor the target writes)
    v_cache: torch.Tensor
    backend: AttentionBackend
    meta: AttentionMetadata
    params: LayerParams  # softmax scale 1, window, and the K/V scales this drafter dequantizes with


@dataclass
class DraftContext:
    positions: torch.Tensor  # [B] int64: the constant draft position of each sequence
    groups: dict[str, DraftGroupStep]  # keyed by layer type


# ---------------------------------------------------------------------------- modules


class DraftAttention(nn.Module):
    """Q-only attention: q_proj -> q_norm -> RoPE, K/V from the target's cache, o_proj."""

    def __init__(self, args: DrafterArgs, layer: int):
        super().__init__()
        self.kind = args.layer_types[layer]
        self.head_dim = args.layer_head_dim(layer)
        self.n_heads = args.num_attention_heads
        self.q_proj = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: DraftContext) -> torch.Tensor:
        b = x.shape[0]
        q = apply_rope(self.q_norm(self.q_proj(x).view(b, self.n_heads, self.head_dim)), cos, sin)
        g = ctx.groups[self.kind]
        o = g.backend.forward(q, g.k_cache, g.v_cache, g.meta, g.params)
        return self.o_proj(o.reshape(b, self.n_heads * self.head_dim))


class DraftLayer(nn.Module):
    def __init__(self, args: DrafterArgs, layer: int):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.self_attn = DraftAttention(args, layer)
        self.mlp = MLP(h, args.intermediate_size)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)
        self.register_buffer("layer_scalar", torch.ones(1))

    def forward(self, x, cos, sin, ctx: DraftContext) -> torch.Tensor:
        h = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, ctx))
        h = h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        return h * self.layer_scalar


class DraftBody(nn.Module):
    """HF's `model.` part: the decoder layers and the final norm (its embed_tokens is unused: the
    input is the target's embedding; it only serves as the tied lm_head when lm_head is absent)."""

    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.layers = nn.ModuleList(DraftLayer(args, i) for i in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class MaskedEmbedder(nn.Module):
    """The centroid-masked head (E2B/E4B, `use_ordered_embeddings`): score `num_centroids` centroids,
    keep the top `centroid_intermediate_top_k`, and score only their tokens (vocab/num_centroids
    each, listed in `token_ordering`); every other token gets -inf."""

    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.top_k = args.centroid_intermediate_top_k
        self.num_centroids = args.num_centroids
        self.vocab_size = args.vocab_size
        self.centroids = nn.Linear(args.hidden_size, args.num_centroids, bias=False)
        self.register_buffer("token_ordering", torch.arange(args.vocab_size, dtype=torch.long))

    def forward(self, h: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
        per = self.vocab_size // self.num_centroids
        top = torch.topk(self.centroids(h), self.top_k, dim=-1).indices  # [B, top_k]
        clusters = self.token_ordering.view(self.num_centroids, per)
        cand = clusters[top].reshape(h.shape[0], -1)  # [B, top_k * per] token ids
        scores = torch.einsum("bd,bkd->bk", h, lm_head_weight[cand])
        out = torch.full((h.shape[0], self.vocab_size), float("-inf"), dtype=scores.dtype, device=h.device)
        return out.scatter_(1, cand, scores)


class Drafter(nn.Module):
    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.args = args
        self.model = DraftBody(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.pre_projection = nn.Linear(2 * args.backbone_hidden_size, args.hidden_size, bias=False)
        self.post_projection = nn.Linear(args.hidden_size, args.backbone_hidden_size, bias=False)
        self.masked_embedding = MaskedEmbedder(args) if args.use_ordered_embeddings else None
        self.register_buffer("sliding_inv_freq", rope_inv_freq(args.head_dim, args.rope_theta_sliding),
                             persistent=False)
        self.register_buffer("full_inv_freq", rope_inv_freq(args.global_head_dim, args.rope_theta_full,
                                                            args.partial_rotary_factor_full), persistent=False)

    def keep_rope_fp32(self) -> "Drafter":
        """Recompute the RoPE inverse frequencies in fp32 after a cast (bf16 rounds them, as in the target)."""
        a, dev = self.args, self.lm_head.weight.device
        self.sliding_inv_freq = rope_inv_freq(a.head_dim, a.rope_theta_sliding).to(dev)
        self.full_inv_freq = rope_inv_freq(a.global_head_dim, a.rope_theta_full, a.partial_rotary_factor_full).to(dev)
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def forward(self, inputs: torch.Tensor, ctx: DraftContext) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs [B, 2*backbone] = [target embedding * sqrt(backbone), target hidden] ->
        (logits [B, V] fp32, next hidden [B, backbone])."""
        for g in ctx.groups.values():
            g.meta.begin_step()
        h = self.pre_projection(inputs.to(self.dtype))
        rope = {SLIDING: rope_cos_sin(ctx.positions, self.sliding_inv_freq, h.dtype),
                FULL: rope_cos_sin(ctx.positions, self.full_inv_freq, h.dtype)}
        for i, layer in enumerate(self.model.layers):
            cos, sin = rope[self.args.layer_types[i]]
            h = layer(h, cos, sin, ctx)
        h = self.model.norm(h)
        if self.masked_embedding is not None:
            logits = self.masked_embedding(h, self.lm_head.weight)
        else:
            logits = self.lm_head(h)
        return logits.float(), self.post_projection(h)


def draft_inputs(target, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """[target embedding of `tokens` * sqrt(backbone hidden) (the scale cast to the weight dtype,
    as the target's own embedding), the target's final-normed hidden state] -> [B, 2*backbone]."""
    w = target.embed_tokens.weight
    scale = float(torch.tensor(math.sqrt(w.shape[1]), dtype=w.dtype))  # a host float: CUDA-graph safe
    emb = F.embedding(tokens, w) * scale
    return torch.cat([emb, hidden.to(emb.dtype)], dim=-1)
