"""One long sequence on a window-bounded sliding cache: its memory and the speed of chunked prefill.

    python -m kselect.measurement.gemma4.long_context [hydra overrides] --context 131072 --prefill-chunk 2048 [--new 64]
        [--check] [--json out.json]

Same selection and model as `kselect run` (random weights for a preset). One engine for one
sequence of --context + --new tokens with max_step_tokens = --prefill-chunk: a random prompt is
prefilled in chunks, then --new tokens are decoded greedily (CUDA graphs where the backends allow),
after a short warm-up (kernel compiles, graph capture) that is not timed.
Reports each group's pool (blocks, bytes) next to what it would be if the sliding group kept every
token, the sliding blocks in use at the end, the GPU's peak allocated memory, and prefill / decode
tokens/s. --check (short contexts: the comparison engine holds every token) also compares the last
prefill logits with an engine that prefills the whole prompt at once, against the model dtype's bar.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.gemma4.kv_cache import LAYER_TYPE_TO_GROUP, group_blocks
from kselect.selector.base.files import atomic_write


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pools(eng: Engine, seq_len: int) -> dict:
    """Per group: blocks and bytes of its pool, and the bytes of a pool that keeps every token."""
    out = {}
    for kind, gc in eng.cache.groups.items():
        nbytes = sum(t.numel() * t.element_size() for d in (gc.k, gc.v) for t in d.values())
        every = group_blocks(gc.block_size, seq_len, 1)
        out[LAYER_TYPE_TO_GROUP[kind]] = dict(
            kv_block=gc.block_size, blocks=gc.num_blocks, bytes=nbytes, window=gc.window,
            bytes_if_every_token=nbytes // gc.num_blocks * every, blocks_in_use=gc.blocks_in_use())
    return out


def run(cfg, sel, model, opts) -> dict:
    dev = model.device
    seq_len = opts.context + opts.new
    graphs = False if opts.no_cuda_graphs else None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    eng = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=seq_len, max_step_tokens=opts.prefill_chunk,
                                          cuda_graphs=graphs))
    prompt = torch.randint(3, model.args.vocab_size, (opts.context,),
                           generator=torch.Generator().manual_seed(opts.seed)).tolist()
    # warm-up: kernel JIT for first and later chunks and for decode, CUDA-graph capture (kept across reset)
    eng.prefill([0], [prompt[:min(opts.context, 2 * opts.prefill_chunk)]])
    tok = 5
    for _ in range(min(3, opts.new)):
        tok = int(eng.decode([0], [tok]).argmax(-1))
    eng.reset()
    _sync(dev)
    t0 = time.perf_counter()
    logits = eng.prefill([0], [prompt])
    _sync(dev)
    t1 = time.perf_counter()
    tok = int(logits.argmax(-1))
    for _ in range(opts.new):
        tok = int(eng.decode([0], [tok]).argmax(-1))
    _sync(dev)
    t2 = time.perf_counter()
    out = dict(model=cfg.model.name, dtype=str(model.dtype).removeprefix("torch."), kv=cfg.kv_cache.dtype,
               backends=eng.backend_names(), context=opts.context, new=opts.new, prefill_chunk=opts.prefill_chunk,
               prefill_tok_s=opts.context / (t1 - t0), decode_tok_s=opts.new / max(t2 - t1, 1e-9),
               cuda_graphs=eng.graphs_captured, pools=pools(eng, seq_len), notes=list(eng.notes))
    if dev.type == "cuda":
        out["peak_allocated_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    if opts.check:
        from kselect.kernels.tolerances import tolerance

        whole = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=seq_len, cuda_graphs=False))
        ref = whole.prefill([0], [prompt])
        err = max_rel_error(logits, ref)
        bar = tolerance(model.dtype, fp8=eng.cache.fp8)
        out["check"] = dict(max_rel_err_vs_whole_prefill=err, bar=bar, ok=err <= bar)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--prefill-chunk", type=int, default=512)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--json", type=Path)
    opts, overrides = ap.parse_known_args(argv)
    if opts.context < 1 or opts.prefill_chunk < 1 or opts.new < 0:
        ap.error("--context and --prefill-chunk must be positive, --new not negative")
    cfg, sel = select(overrides)
    model, _, source = build_model(cfg, opts.seed)
    res = run(cfg, sel, model, opts)
    print(f"{res['model']} ({source}) on {model.device}, kv {res['kv']}; {res['backends']}")
    print(f"context {res['context']:,} in chunks of {res['prefill_chunk']:,}: prefill {res['prefill_tok_s']:,.0f} tok/s, "
          f"decode {res['decode_tok_s']:,.1f} tok/s (graphs {'on' if res['cuda_graphs'] else 'off'})")
    for g, p in res["pools"].items():
        print(f"  {g:15s} pool {p['blocks']:>7,} blocks of {p['kv_block']} = {p['bytes'] / 2**20:>10,.1f} MiB "
              f"(every token kept: {p['bytes_if_every_token'] / 2**20:,.1f} MiB); in use at the end {p['blocks_in_use']:,}")
    if "peak_allocated_gib" in res:
        print(f"  peak allocated {res['peak_allocated_gib']:.2f} GiB")
    if "check" in res:
        c = res["check"]
        print(f"  last prefill logits vs a whole-prompt prefill: {c['max_rel_err_vs_whole_prefill']:.2e} "
              f"({'ok' if c['ok'] else 'ABOVE'} the {c['bar']:g} bar)")
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        from kselect.provenance import provenance  # the project's commit and tool versions

        atomic_write(opts.json, json.dumps(dict(res, source=source, overrides=overrides, **provenance()), indent=1))
    return 0


if __name__ == "__main__":
    from kselect.commands.run import script_main as cli

    cli(main)  # every error: exit 2, one paragraph (--debug: traceback)
