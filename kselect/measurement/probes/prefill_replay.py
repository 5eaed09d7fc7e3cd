"""Probe: every replay of a prefill graph against the same padded step run eagerly, chunk by chunk (tiny model, bf16,
FP8 cache, TRITON_ATTN, a 101-token prompt in chunks of 8), with the Triton kernel's small-batch path on and off, and
the attention calls the graphs captured. `python3 -m kselect.measurement.probes.prefill_replay`
(bench/results/h200/epilogues/D/replay.log)."""
import torch

import kselect.kernels.triton_paged as tp
from kselect.gemma4 import graphs as pg
from kselect.gemma4.build import build_model
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.selector.api import compose, resolve


def main() -> None:
    cfg = compose(["model.dtype=bfloat16", "kv_cache=fp8", "attention.backend=TRITON_ATTN"])
    sel = resolve(cfg)
    model, _, _ = build_model(cfg, seed=0)
    orig = pg.PrefillGraph.step

    def step(self, seq, start, tokens):
        if self.graph is None:
            return orig(self, seq, start, tokens)
        self.fill(seq, start, tokens)
        n = len(tokens)
        got = self.replay()[:n].float().clone()
        torch.cuda.synchronize()
        again = self._run()[:n].float()
        print(f"start {start} n {n}: replay vs eager padded {max_rel_error(got, again):.4f}", flush=True)
        return self.replay()[:n].clone()

    pg.PrefillGraph.step = step
    calls = []
    orig_attn = tp.paged_attention_triton

    def attn(q, k_cache, v_cache, cu, su, bt, scale, **kw):
        out = orig_attn(q, k_cache, v_cache, cu, su, bt, scale, **kw)
        if torch.cuda.is_current_stream_capturing():
            calls.append((tuple(q.shape), q.dtype, kw.get("max_seqlen_q"), kw.get("max_seqlen_k"), kw.get("window_left")))
        return out

    tp.paged_attention_triton = attn
    for small in (4, 0):
        tp.SMALL["batch"] = small
        e = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=256, cuda_graphs=True, max_step_tokens=8))
        print(f"SMALL[\"batch\"]={small}")
        e.generate([[2] + list(range(10, 110))], 1, return_logits=True, stop_at_eos=False)
        print("captured attention calls:", sorted(set(calls)))
        calls.clear()


if __name__ == "__main__":
    main()
