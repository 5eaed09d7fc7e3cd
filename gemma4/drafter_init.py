"""Seeded weights for MTP drafters (gemma4/drafter.py): random, or the `copy_init` heuristic (a drafter that
proposes the token it was fed). Trained assistants load through gemma4/checkpoint.py `load_drafter`."""

from __future__ import annotations

import math

import torch

from .config import DrafterArgs
from .drafter import Drafter


def init_drafter_weights(drafter: Drafter, seed: int = 0) -> Drafter:
    """Deterministic weights: linears ~ N(0, 1/fan_in), norms and layer scalars ~ 1 + N(0, 0.1^2),
    token_ordering a seeded permutation (independent of device and module order)."""
    gen = torch.Generator().manual_seed(seed)
    state = drafter.state_dict()
    with torch.no_grad():
        for name in sorted(state):
            t = state[name]
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "token_ordering":
                v = torch.randperm(t.numel(), generator=gen)
            elif "norm" in name or leaf == "layer_scalar":
                v = 1.0 + 0.1 * torch.randn(t.shape, generator=gen)
            else:
                v = torch.randn(t.shape, generator=gen) / math.sqrt(t.shape[-1])
            t.copy_(v.to(t.dtype))
    return drafter


def copy_init(drafter: Drafter, target_embedding: torch.Tensor, residual_scale: float = 0.1) -> Drafter:
    """Make a (random) drafter a noisy *copy drafter*: it proposes the token it was fed.

    The embedding half of `pre_projection` (P) maps the target embedding e_t to P e_t; the head's row
    t becomes P e_t / |P e_t| (after unit final-norm weights), so with the decoder layers muted the
    logits are the cosine between P e_t and P e_t', largest at t' = t. The layers' post-attention
    and post-MLP norm weights and the hidden-state half of `pre_projection` are scaled by
    `residual_scale`: context still perturbs the drafts. Deterministic given
    the drafter's weights. A heuristic init (random tiny targets repeat tokens a lot), not a trained
    drafter: the acceptance it gets is measured, never assumed."""
    a = drafter.args
    with torch.no_grad():
        w = target_embedding.detach().to(torch.float32)  # on the target's device (31B: a 262144 x 5376 matmul)
        p = drafter.pre_projection.weight[:, : a.backbone_hidden_size].detach().float().to(w.device)
        rows = (w * math.sqrt(a.backbone_hidden_size)) @ p.t()  # [V, draft hidden]
        rows = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        drafter.lm_head.weight.copy_(rows.to(drafter.lm_head.weight))
        drafter.model.norm.weight.fill_(1.0)
        drafter.pre_projection.weight[:, a.backbone_hidden_size:].mul_(residual_scale)
        for layer in drafter.model.layers:
            layer.post_attention_layernorm.weight.mul_(residual_scale)
            layer.post_feedforward_layernorm.weight.mul_(residual_scale)
            layer.layer_scalar.fill_(1.0)
    return drafter


def build_random_drafter(args: DrafterArgs, seed: int = 0, device="cpu", dtype: torch.dtype | None = None,
                         copy_from: torch.Tensor | None = None) -> Drafter:
    """Seeded random weights; with `copy_from` (the target's embedding) the `copy_init` heuristic."""
    d = init_drafter_weights(Drafter(args), seed)
    if copy_from is not None:
        copy_init(d, copy_from)
    return d.to(device=device, dtype=dtype or args.torch_dtype).eval().keep_rope_fp32()
