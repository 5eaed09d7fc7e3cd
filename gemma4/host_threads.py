"""How many intra-op CPU threads torch keeps while an engine serves on a GPU.

torch sizes its CPU thread pool to the host's cores. An engine on a GPU runs only small host ops between its
launches (block tables, slot mappings, sampling bookkeeping), and on more than one thread they can stall: on the
H200's 16 cores a 4,096-token prefill step's slot mappings took 8-13 ms of CPU time, without a context switch, in
up to a third of the steps (0.5-4.7 ms in the others); on one thread they took 0.24-0.35 ms in every step
(bench/results/h200/host_threads/S4/).
vLLM's GPU workers serve on one intra-op thread for the same reason (vLLM #49919), and leave an OMP_NUM_THREADS
set outside alone; so does this engine.
"""

from __future__ import annotations

import os

import torch


def serving_threads(device: torch.device | str) -> int | None:
    """The intra-op threads an engine on `device` serves with: 1 on a GPU, unless OMP_NUM_THREADS is set (then, and
    on the CPU, where the model's own math runs on those threads: None, torch's setting stays)."""
    if torch.device(device).type == "cpu" or "OMP_NUM_THREADS" in os.environ:
        return None
    return 1


def use_serving_threads(device: torch.device | str) -> int:
    """Apply serving_threads(device); returns torch's intra-op thread count after."""
    n = serving_threads(device)
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
