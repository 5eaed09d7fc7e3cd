"""Token selection from logits: greedy, or seeded temperature / top-k sampling."""

from __future__ import annotations

import torch


def probs_of(logits: torch.Tensor, temperature: float, top_k: int = 0) -> torch.Tensor:
    """[.., V] logits -> fp32 probabilities of softmax(logits / T) restricted to the top-k (0 = all)."""
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int = 0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, V] -> [B] next tokens: argmax at temperature 0, else softmax(logits/T) over the top-k."""
    if temperature <= 0:
        return logits.argmax(-1)
    return torch.multinomial(probs_of(logits, temperature, top_k), 1, generator=generator).squeeze(-1)


def max_rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (b is the reference)."""
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
