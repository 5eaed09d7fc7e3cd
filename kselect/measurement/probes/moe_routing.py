"""Probe: do the padded (graph) and unpadded (eager) chunked prefills route each token to the same experts? Tiny model,
bf16, FP8 cache, TRITON_ATTN, a 101-token prompt in chunks of 8; the padded step runs eagerly (its replays equal it,
prefill_replay.py) so the router hooks see it. `python3 -m kselect.measurement.probes.moe_routing`
(bench/results/h200/epilogues/D/router.log)."""
import torch

from kselect.gemma4 import graphs as pg
from kselect.gemma4.build import build_model
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.selector.api import compose, resolve


def main() -> None:
    cfg = compose(["model.dtype=bfloat16", "kv_cache=fp8", "attention.backend=TRITON_ATTN"])
    sel = resolve(cfg)
    model, _, _ = build_model(cfg, seed=0)
    log = []
    for i, layer in enumerate(model.layers):
        if getattr(layer, "moe", False):
            def hook(m, a, out, i=i):
                log.append((i, out[1].clone(), out[0].float().clone()))

            layer.router.register_forward_hook(hook)

    def step(self, seq, start, tokens):  # the padded step, run eagerly every time (replays equal it exactly)
        self.fill(seq, start, tokens)
        return self._run()[: len(tokens)].clone()

    pg.PrefillGraph.step = step
    p = [2] + list(range(10, 110))
    runs = {}
    for graphs in (False, True):
        log.clear()
        e = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=256, cuda_graphs=graphs, max_step_tokens=8))
        e.prefill_graphs.on = graphs
        r = e.generate([p], 1, return_logits=True, stop_at_eos=False)
        runs[graphs] = (list(log), r.logits[0].float())
    print("logits padded vs unpadded:", max_rel_error(runs[True][1], runs[False][1]))
    flips = 0
    for (li, ia, wa), (lj, ib, wb) in zip(runs[False][0], runs[True][0]):
        n = ia.shape[0]
        a, b = ia.sort(1).values, ib[:n].sort(1).values
        bad = (a != b).any(1).nonzero().flatten().tolist()
        if bad:
            flips += 1
            print(f"layer {li}: rows {bad} route {a[bad].tolist()} vs {b[bad].tolist()}; "
                  f"weights {wa[bad].tolist()} vs {wb[:n][bad].tolist()}")
    print("router calls", len(runs[False][0]), len(runs[True][0]), "calls with a flip", flips)


if __name__ == "__main__":
    main()
