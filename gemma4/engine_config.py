"""How an `Engine` (gemma4/engine.py) runs: one frozen value instead of a dozen keywords."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .graphs import DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class EngineConfig:
    """max_seqs, max_seq_len: the batch and the tokens per sequence the cache is sized for.
    device: where the cache lives (None: the model's device).
    kv_scales: FP8 K/V scales per layer {layer: (k_scale, v_scale)} to start from (None: 1.0, or calibrate).
    cuda_graphs: decode as CUDA graphs when every backend supports them (None or True: where possible; False: never).
    max_step_tokens: the most tokens one sequence may add in one forward; prompts longer than that are
        prefilled in chunks (`Engine.prefill`). It bounds the sliding-window cache per sequence to
        W - 1 + max_step_tokens tokens (None: prompts prefill whole, and that group is sized for every token).
    prefill_graphs: one sequence's multi-token steps (prompts, chunks) of up to prefill_graph_tokens replay
        CUDA graphs per token bucket (gemma4/graphs.py); None = whenever decode graphs are on and every
        prefill backend supports graphs.
    serving_threads: on a GPU, torch's intra-op CPU pool shrinks to one thread for the process
        (gemma4/host_threads.py: multi-threaded host ops stalled steps by 8-13 ms); False leaves it."""

    max_seqs: int = 8
    max_seq_len: int = 512
    device: torch.device | str | None = None
    kv_scales: dict[int, tuple[float, float]] | None = field(default=None, compare=False)
    cuda_graphs: bool | None = None
    max_step_tokens: int | None = None
    prefill_graphs: bool | None = None
    prefill_graph_tokens: int = DEFAULT_MAX_TOKENS
    serving_threads: bool = True

    def __post_init__(self) -> None:
        if self.max_step_tokens is not None and self.max_step_tokens < 1:
            raise ValueError(f"max_step_tokens must be a positive token count or None, got {self.max_step_tokens}")

