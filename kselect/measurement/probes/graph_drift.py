"""How far CUDA-graph steps drift from eager steps on a random-weight model (issue #16's prefill graphs).

Teacher-forces one prompt's eager greedy tokens through engines that differ only in how steps run (eager
again, eager in 2-token chunks, decode + prefill graphs, decode graphs only) and prints each one's max
relative logits error against the eager run, over all 24 steps and at the prefill (step 0). Graph steps use
other launch shapes (padded prefill rows, max_seqlen_k of the whole table), so in bf16, and more with an FP8
cache, they round differently; the size of that drift is what tests/gemma4/test_prefill_graph.py bounds.

    python -m kselect.measurement.probes.graph_drift            # on a GPU (tiny preset, TRITON_ATTN)
"""

from __future__ import annotations

import torch

from kselect.gemma4.build import build_model
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.selector.api import compose, resolve

CASES = (["model.dtype=bfloat16", "kv_cache=fp8", "attention.backend=TRITON_ATTN"],
         ["model.dtype=bfloat16", "attention.backend=TRITON_ATTN"])


def main() -> None:
    for over in CASES:
        cfg = compose(over)
        sel = resolve(cfg)
        model, _, _ = build_model(cfg, seed=0)
        prompt = [2] + list(range(10, 15))
        make = lambda **k: Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=256, **k))  # noqa: E731
        ref = make(cuda_graphs=False).generate([prompt], 24, return_logits=True, stop_at_eos=False)
        want = torch.stack(ref.logits)
        for name, eng in (("eager chunk 2", make(cuda_graphs=False, max_step_tokens=2)),
                          ("eager again", make(cuda_graphs=False)), ("graphs", make(cuda_graphs=True)),
                          ("decode graphs only", make(cuda_graphs=True, prefill_graphs=False))):
            got = torch.stack(eng.generate([prompt], 24, return_logits=True, stop_at_eos=False, forced=ref.tokens).logits)
            print(over[1:], name, "max rel err", round(max_rel_error(got, want), 4), "step0",
                  round(max_rel_error(got[:1], want[:1]), 4), "prefill graph steps", eng.prefill_graph_steps)


if __name__ == "__main__":
    main()
