"""Prefill of one prompt on several selections, timed in interleaved rounds (kselect/measurement/e2e/ --prefill-rounds).

Why: e2e.py times each selection's prefill in its own block of reps, one selection after another. Over a run the
GPU drifts (clocks, temperature) by more than the 1-3% that separates two prefill selections: in
bench/results/h200/splits/E1/ two selections on the same FA4 prefill kernels read 1.3% apart, and the profiled
GEMMs of the later one were 2% slower. Here every selection's engine is built and warmed first, then each round
prefills the prompt on every engine, so drift falls on all of them alike. The orders follow a Williams design
(`balanced_orders`): every selection runs right after every other equally often. A plain rotation keeps the cycle
a -> b -> c -> a, so with three or more selections each one always follows the same one; on the H200 a long
prefill runs at the 700 W power cap (bench/results/h200/clocks/), so what ran just before can carry over, and
with a fixed predecessor it would carry over into one selection's figures only.
Each visit first prefills `warm` times untimed: in bench/results/h200/pdl/ the rounds, timing an engine's first
prefill after four others ran, read 5-6% slower than the same prompt in each selection's own block of runs (31B,
vLLM's choice: 53.3 vs 50.0 ms). A serving engine is never that cold, and whether the cost differs by selection was
not measured.
"""

from __future__ import annotations

import statistics

from kselect.gemma4.engine import Engine, EngineConfig
from kselect.gemma4.graphs import DEFAULT_MAX_TOKENS


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n selections in which each selection follows each other one equally often (a Williams Latin
    square: n orders for even n; for odd n those and their reverses, 2n orders)."""
    if n < 1:
        raise ValueError(f"need at least one selection, got {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows + [r[::-1] for r in rows] if n % 2 and n > 1 else rows


def visit_order(keys: list, rounds: int):
    """(round, key) for every visit of `rounds` rounds, round r in balanced_orders' order r mod its length."""
    orders = balanced_orders(len(keys))
    for r in range(rounds):
        for i in orders[r % len(orders)]:
            yield r, keys[i]


def interleaved_prefill(model, entries: dict, prompt: list[int], rounds: int, graphs, warm: int = 1,
                        prefill_graph_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
    """entries {key: groups} -> {key: record}: the median of `rounds` prefills of `prompt` (B1) on each selection,
    every round visiting every engine (`visit_order`; a multiple of balanced_orders' length balances the design),
    each visit timing the prefill after `warm` untimed ones.
    graphs: the Engine's cuda_graphs (None: its default); prefill_graph_tokens: its longest graphed prefill step."""
    if rounds < 1:
        raise ValueError(f"--prefill-rounds must be at least 1, got {rounds}")
    engines = {k: Engine(model, g, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1, cuda_graphs=graphs,
                                                prefill_graph_tokens=prefill_graph_tokens))
               for k, g in entries.items()}
    try:
        for eng in engines.values():  # warm-up: kernel compiles, prefill graph capture
            eng.generate([prompt], 1, stop_at_eos=False)
        keys = list(engines)
        times: dict = {k: [] for k in keys}
        for _, k in visit_order(keys, rounds):
            for _ in range(warm):
                engines[k].generate([prompt], 1, stop_at_eos=False)
            times[k].append(engines[k].generate([prompt], 1, stop_at_eos=False).prefill_s)
        out = {}
        for k, ts in times.items():
            p = statistics.median(ts)
            out[k] = dict(prefill_tok_s=len(prompt) / p, prefill_ms=p * 1e3, prefill_ms_reps=[round(t * 1e3, 3) for t in ts],
                          rounds=rounds, warm=warm, selections=len(keys), prefill_graph_steps=engines[k].prefill_graph_steps,
                          order="williams")
        return out
    finally:
        engines.clear()
