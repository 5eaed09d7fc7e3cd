"""Probe: chunked prefill (chunks of 8) of the tiny model, bf16, FP8 cache, TRITON_ATTN: prefill graphs vs eager by
prompt length, with the fused forward and the unfused modules, whole prefill, and the Triton kernel's small-batch path
off (SMALL["batch"] = 0). Logits and every KV cache layer compared. From the checkout root, the device kit on PYTHONPATH:

    python3 -m kselect.measurement.probes.prefill_graph_chunks   # bench/results/h200/epilogues/D/chunks.log
"""
import sys

import torch

import kselect.kernels.triton_paged as tp
from kselect.gemma4.build import build_model
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.selector.api import compose, resolve


def main() -> None:
    over = ["model.dtype=bfloat16", "kv_cache=fp8", "attention.backend=TRITON_ATTN"]
    cfg = compose(over)
    sel = resolve(cfg)
    model, _, _ = build_model(cfg, seed=0)

    def caches(e):
        return {(k, i): (gc.k[i].float().clone(), gc.v[i].float().clone()) for k, gc in e.cache.groups.items()
                for i in gc.producers}

    def one(n, step, mode, label):
        model.set_compute(mode)
        p = [2] + list(range(10, 10 + n - 1))
        out = {}
        for graphs in (False, True):
            e = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=256, cuda_graphs=graphs, max_step_tokens=step))
            r = e.generate([p], 1, return_logits=True, stop_at_eos=False)
            out[graphs] = (r.logits[0].float(), caches(e), e.prefill_graph_steps)
        err = max_rel_error(out[True][0], out[False][0])
        worst = []
        for key, (k, v) in out[True][1].items():
            k0, v0 = out[False][1][key]
            dk = (k - k0).abs().amax().item()
            slots = ((k - k0).abs().reshape(k.shape[0] * k.shape[1], -1).amax(1) > 0).nonzero().flatten()[:8].tolist()
            worst.append((dk, key, slots))
        worst.sort(reverse=True)
        print(f"{label} n={n} step={step} mode={mode}: logits graph vs eager {err:.4f}, graph steps {out[True][2]}; "
              f"worst cache diffs {[(round(w[0], 3), w[1], w[2]) for w in worst[:3]]}", flush=True)

    for n in (31, 40, 48, 57, 64, 65, 72, 80, 96, 101):
        one(n, 8, "auto", "as-is")
    one(101, 8, "unfused", "as-is")
    one(101, None, "auto", "as-is")
    tp.SMALL["batch"] = 0
    one(101, 8, "auto", "no-small-path")
    one(64, 8, "auto", "no-small-path")


if __name__ == "__main__":
    main()
