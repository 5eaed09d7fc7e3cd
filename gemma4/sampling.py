"""Token selection from logits (greedy, or seeded temperature / top-k sampling), and the check of a generation
request's prompts, counts and sampling settings."""

from __future__ import annotations

import math
import numbers

import torch


def integer_type(tp: type) -> bool:
    """An integer type a token id or count may have: int, NumPy's integers (numbers.Integral), not bool."""
    return issubclass(tp, numbers.Integral) and not issubclass(tp, bool)


def check_request(prompts, max_new_tokens, temperature, top_k, *, max_seqs: int, max_seq_len: int) -> None:
    """Refuse a generation request that would be misread: no prompts or an empty one, a count or sampling setting of
    the wrong kind or out of range (each named with what is allowed), more sequences or positions than the engine
    holds. Token ids are the engine's to check (Engine.check_tokens)."""
    try:
        empty = len(prompts) == 0 or any(len(p) == 0 for p in prompts)
    except TypeError:
        empty = True
    if empty:
        raise ValueError("prompts: a non-empty list of non-empty token-id lists is needed")
    if not integer_type(type(max_new_tokens)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r}: an integer >= 1 is needed")
    real = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
    if not real or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature={temperature!r}: a finite number >= 0 is needed (0 = greedy)")
    if not integer_type(type(top_k)) or top_k < 0:
        raise ValueError(f"top_k={top_k!r}: an integer >= 0 is needed (0 = every token)")
    if len(prompts) > max_seqs:
        raise ValueError(f"{len(prompts)} prompts > max_seqs={max_seqs}")
    total = max(len(p) for p in prompts) + max_new_tokens
    if total > max_seq_len:
        raise ValueError(f"prompt + max_new_tokens = {total} > max_seq_len={max_seq_len}")


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
