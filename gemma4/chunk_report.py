"""What chunked prefill (`kselect run --prefill-chunk N`, `EngineConfig(max_step_tokens=N)`) did, for the
run's summary: the chunk size, the prefill steps each prompt took (gemma4/engine.py's chunk_ends,
the function the engine cuts with), and the sliding-window pool: its size, what it would be
without chunking, and the most blocks the run held at once."""

from __future__ import annotations

from .block_manager import group_blocks
from .config import SLIDING
from .engine import chunk_ends


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.2f} MiB"


def prefill_steps(prompts: list[list[int]], mm_spans, n: int) -> list[int]:
    """Prefill steps per prompt in chunks of n tokens; ValueError when an image span is longer than n."""
    spans = mm_spans or [[] for _ in prompts]
    return [len(chunk_ends(len(p), 0, sp, n)) for p, sp in zip(prompts, spans)]


def chunking_lines(eng, prompts: list[list[int]], mm_spans=None) -> list[str]:
    """Lines for a run whose engine has max_step_tokens set (empty when it has none)."""
    n = eng.max_step_tokens
    if not n:
        return []
    steps = prefill_steps(prompts, mm_spans, n)
    lens = ", ".join(str(len(p)) for p in prompts)
    out = [f"prefill chunks: at most {n} tokens per sequence per step (an image span is never cut); "
           f"prompts of {lens} tokens took {', '.join(map(str, steps))} prefill steps"]
    g = eng.cache.groups.get(SLIDING)
    if g is None:
        return out + ["sliding-window pool: this model has no sliding layers; every group keeps every token"]
    whole = group_blocks(g.block_size, eng.max_seqs * eng.max_seq_len, eng.max_seqs, g.window, None)
    per_block = sum(t[0].numel() * t.element_size() for d in (g.k, g.v) for t in d.values())
    per_seq = g.window - 1 + n
    bounded = g.num_blocks < whole
    out.append(
        f"sliding-window pool: {g.num_blocks} blocks of {g.block_size} tokens ({_mib(g.num_blocks * per_block)}) "
        f"for {eng.max_seqs} sequences, "
        + (f"sized for window - 1 + chunk = {g.window} - 1 + {n} = {per_seq} tokens a sequence; without chunking "
           f"{whole} blocks ({_mib(whole * per_block)}) for {eng.max_seq_len} tokens a sequence"
           if bounded else
           f"the same as without chunking: window - 1 + chunk = {per_seq} tokens a sequence, in whole blocks, "
           f"saves nothing against keeping all {eng.max_seq_len} tokens a sequence can reach")
        + f"; at most {g.peak_in_use} blocks in use during the run")
    return out
