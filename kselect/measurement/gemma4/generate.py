"""Gemma-4 generation throughput on the selected backends: prefill and decode tokens/s.

    python -m kselect.measurement.gemma4.generate [hydra overrides] [--batch 1 4 16] [--prompt-len 128] [--new 64] \
        [--json out.json]

Same selection and model as `kselect run` (bundled gemma4_tiny by default, or model.checkpoint);
random prompts of `--prompt-len` tokens, greedy, one warm-up run per batch size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig
from kselect.selector.base.files import atomic_write


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--json", type=Path)
    opts, overrides = ap.parse_known_args(argv)
    cfg, sel = select(overrides)
    model, _, source = build_model(cfg, opts.seed)
    if model.device.type == "cpu" and sum(p.numel() for p in model.parameters()) < 5e7:
        torch.set_num_threads(1)
    g = torch.Generator().manual_seed(opts.seed)
    rows = []
    print(f"model {cfg.model.name} ({source}) on {model.device}; kv {cfg.kv_cache.dtype}/{cfg.kv_cache.scales}")
    print(f"{'batch':>5} {'prefill tok/s':>14} {'decode tok/s':>13} {'graphs':>6}  backends")
    for b in opts.batch:
        prompts = torch.randint(3, model.args.vocab_size, (b, opts.prompt_len), generator=g).tolist()
        eng = Engine(model, sel, EngineConfig(max_seqs=b, max_seq_len=opts.prompt_len + opts.new,
                                              cuda_graphs=False if opts.no_cuda_graphs else None))
        if eng.cache.fp8 and cfg.kv_cache.scales == "calibrated":
            eng.calibrate(prompts)
        eng.generate(prompts, 2)  # warm-up (and graph capture on the first decode)
        r = eng.generate(prompts, opts.new, stop_at_eos=False)
        backends = ", ".join(f"{k}={v}" for k, v in eng.backend_names().items())
        print(f"{b:>5} {r.prefill_tok_s:>14,.0f} {r.decode_tok_s:>13,.0f} {'on' if r.cuda_graphs else 'off':>6}  {backends}")
        rows.append(dict(batch=b, prompt_len=opts.prompt_len, new_tokens=opts.new, prefill_tok_s=r.prefill_tok_s,
                         decode_tok_s=r.decode_tok_s, cuda_graphs=r.cuda_graphs, backends=eng.backend_names()))
    if opts.json:
        atomic_write(opts.json, json.dumps(dict(model=cfg.model.name, device=str(model.device),
                                             environment=sel.environment, rows=rows), indent=2, default=str))
    return 0


if __name__ == "__main__":
    from kselect.commands.run import script_main as cli

    cli(main)  # every error: exit 2, one paragraph (--debug: traceback)
