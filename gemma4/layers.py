"""Gemma-4's building blocks: the norm, RoPE tables, GeGLU MLP and the MoE router and experts.

Pure modules and functions over tensors (nothing of the step, the cache or the backends); gemma4/model.py
assembles them into the decoder, gemma4/ops.py and gemma4/fused.py compute with them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import Gemma4Args


class RMSNorm(nn.Module):
    """x * (mean(x^2)+eps)^-0.5 [* weight], computed in fp32. The weight multiplies directly (no 1+w)."""

    def __init__(self, dim: int, eps: float = 1e-6, with_scale: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if with_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            out = out * self.weight.float()
        return out.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, partial: float = 1.0) -> torch.Tensor:
    """[head_dim/2] inverse frequencies. Default RoPE: partial=1. Proportional RoPE (full layers):
    the first int(partial*head_dim/2) pairs get theta^(-2i/head_dim) (denominator = the FULL head
    dim), the remaining pairs get 0, i.e. are not rotated."""
    n_rot = int(partial * head_dim // 2)
    inv = 1.0 / (theta ** (torch.arange(0, 2 * n_rot, 2, dtype=torch.float32) / head_dim))
    return torch.cat([inv, torch.zeros(head_dim // 2 - n_rot, dtype=torch.float32)])


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    freqs = positions.float()[:, None] * inv_freq[None, :].to(positions.device)
    emb = torch.cat([freqs, freqs], dim=-1)  # NeoX rotate_half layout
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos/sin [T, D]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """GeGLU: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, args: Gemma4Args):
        super().__init__()
        self.top_k = args.top_k_experts
        self.root_size = args.hidden_size**-0.5
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, with_scale=False)
        self.proj = nn.Linear(args.hidden_size, args.num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(args.hidden_size))
        self.per_expert_scale = nn.Parameter(torch.ones(args.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x) * self.scale * self.root_size
        probs = F.softmax(self.proj(h), dim=-1, dtype=torch.float32)  # over all experts
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        return w * self.per_expert_scale[idx], idx  # [T, K] fp32, [T, K]


class Experts(nn.Module):
    """E GeGLU experts as 3D tensors (HF layout): gate_up_proj [E, 2I, H], down_proj [E, H, I]."""

    def __init__(self, args: Gemma4Args):
        super().__init__()
        e, h, i = args.num_experts, args.hidden_size, args.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, static: bool = False) -> torch.Tensor:
        if static:
            return self._forward_gathered(x, weights, idx)
        out = torch.zeros_like(x)
        k = idx.shape[1]
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.gate_up_proj.shape[0]).tolist()
        token = order // k
        w = weights.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            t, we = token[start : start + n], w[start : start + n]
            start += n
            gate, up = F.linear(x[t], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(gelu_tanh(gate) * up, self.down_proj[e]) * we[:, None]
            out.index_add_(0, t, y.to(out.dtype))
        return out

    def _forward_gathered(self, x, weights, idx):
        """No host syncs (CUDA-graph safe): gather each token's K experts and batch-multiply."""
        t, k = idx.shape
        xs = x.repeat_interleave(k, dim=0)[:, :, None]  # [T*K, H, 1]
        gate, up = torch.bmm(self.gate_up_proj[idx.reshape(-1)], xs).squeeze(-1).chunk(2, dim=-1)
        y = torch.bmm(self.down_proj[idx.reshape(-1)], (gelu_tanh(gate) * up)[:, :, None]).squeeze(-1)
        y = y * weights.reshape(-1)[:, None]
        return y.view(t, k, -1).sum(1).to(x.dtype)



def rope_row_tables(positions: torch.Tensor, inv: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [T, F] of positions [T] times one frequency row inv [F], each rounding once as it stores."""
    # integer positions * fp32 frequencies multiply in fp32, as positions.float() * inv does (one kernel fewer);
    # frequencies left in a 16-bit dtype (no keep_rope_fp32) would multiply in it, so those positions go to fp32
    pos = positions if inv.dtype == torch.float32 else positions.float()
    freqs = pos[:, None] * inv[None, :]
    cos = torch.empty(freqs.shape, dtype=dtype, device=freqs.device)
    sin = torch.empty_like(cos)
    torch.cos(freqs, out=cos)
    torch.sin(freqs, out=sin)
    return cos, sin


def softcap_logits(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """Gemma's final logit softcap."""
    return torch.tanh(logits / cap) * cap
