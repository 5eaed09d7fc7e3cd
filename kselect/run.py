"""`kselect run [hydra overrides] [--options]`: select kernels, then run Gemma-4 on them.

    kselect run                                   # bundled gemma4_tiny, this machine
    kselect run kv_cache=fp8 kv_cache.scales=calibrated --max-new-tokens 32
    kselect run platform=sm90 model.checkpoint=/ckpt/gemma-4-e2b --prompt "Hello"

1. compose + validate the config (selector.api) and resolve the selection; print its table;
2. build the model: `model.checkpoint` (an HF folder) or seeded random weights for the preset;
3. generate for a few prompts, each KV-cache group's attention on the backend selected for it;
4. print the outputs, prefill/decode tokens/s and the backend per group; with --prefill-chunk, the
   chunk size, the prefill steps per prompt and the sliding-window pool's size (gemma4/chunk_report.py);
5. numerics: replay the same tokens with every attention call of the selected backends compared
   against TORCH_REFERENCE on the same inputs (gemma4/attention_check.py), each kernel held to its
   own bar (kernels/tolerances.py); exit 1 when a call fails. Groups that run TORCH_REFERENCE are
   not compared (it is the reference). Also printed: the end-to-end logit drift against an
   all-reference run and, for an FP8 cache, the error against an unquantized one.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from kselect.gemma4.build import (CALIBRATION_TEXT, DEFAULT_PROMPTS, RunError, build_model,
                                   encode, select)
from kselect.gemma4.chunk_report import chunking_lines, prefill_steps

# model.multimodal=true: no vision tower here, so every prompt gets this many placeholder "image" tokens
# (the pad id, which is what HF embeds at image slots before merging vision features) right after BOS,
# marked as one bidirectional image span.
IMAGE_TOKENS = 20
WARMUP_TOKENS = 2  # the warm-up generation before the timed one


def check_context(prompts: list[list[int]], max_new_tokens: int, context: int, cfg) -> None:
    """The longest prompt (in tokens, BOS and image placeholders included) plus the new tokens fit the model's
    context (max_position_embeddings); past it the positions are ones the model was never built for."""
    longest = max(map(len, prompts))
    if longest + max_new_tokens <= context:
        return
    if cfg.model.checkpoint:
        how = f"a checkpoint whose config.json has a larger max_position_embeddings (model.checkpoint={cfg.model.checkpoint})"
    else:
        how = f"raise it with model.max_position_embeddings=N (model={cfg.model.name})"
    raise RunError(f"--prompt: the longest prompt is {longest} tokens (with BOS), plus --max-new-tokens {max_new_tokens} "
                   f"= {longest + max_new_tokens} > the model's context of {context} tokens (max_position_embeddings); "
                   f"allowed: a prompt of at most {max(context - max_new_tokens, 0)} tokens with these settings, fewer "
                   f"--max-new-tokens, or {how}")


def check_drafter(cfg, folder: str, target) -> None:
    """`--drafter DIR`: read only by spec_decode=mtp; its config.json read and fitted to the target up front."""
    from kselect.gemma4.checkpoint import read_drafter_config
    from kselect.gemma4.config import DrafterError

    if cfg.spec_decode.method != "mtp":
        raise RunError(f"--drafter {folder}: only spec_decode=mtp runs a drafter (here spec_decode="
                       f"{cfg.spec_decode.method}); allowed: add spec_decode=mtp, or leave --drafter out")
    try:
        read_drafter_config(folder, target)
    except DrafterError as e:
        raise RunError(f"--drafter: {e}") from None


def parse(argv: list[str]) -> tuple[list[str], argparse.Namespace]:
    ap = _parser()
    opts, overrides = ap.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        ap.error(f"unknown option(s) {bad}")
    return overrides, opts


def _parser(add_help: bool = True) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kselect run", description=__doc__.split("\n")[0], add_help=add_help,
                                 allow_abbrev=False, epilog="Other arguments are Hydra overrides (see conf/config.yaml).")
    ap.add_argument("--prompt", action="append", help="a prompt (repeat for a batch); default: 4 built-in prompts")
    ap.add_argument("--max-new-tokens", type=_bounded(int, 1, 1 << 16), default=24)
    ap.add_argument("--temperature", type=_bounded(float, 0.0, 100.0), default=0.0, help="0 = greedy")
    ap.add_argument("--top-k", type=_bounded(int, 0, 1 << 21), default=0)
    ap.add_argument("--seed", type=_bounded(int, 0, (1 << 63) - 1), default=0, help="sampling seed (and the random-weight seed)")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--prefill-chunk", type=_positive_int, default=None, metavar="N",
                    help="prefill prompts in steps of N tokens; the sliding-window cache then holds "
                         "window - 1 + N tokens per sequence instead of every token")
    ap.add_argument("--no-check", action="store_true", help="skip the TORCH_REFERENCE numerics check")
    ap.add_argument("--drafter", help="spec_decode=mtp: an HF Gemma4AssistantForCausalLM folder (default: seeded "
                    "tiny drafters with the preset's drafter: shapes)")
    return ap


def gpu_tiny_in_bf16(cfg, overrides: list[str]) -> bool:
    """The tiny model's preset dtype is fp32 (for CPUs); on CUDA the main job runs it in bf16, unless
    the command line names a dtype."""
    named = any(o.lstrip("+~").startswith("model.dtype=") for o in overrides)
    return cfg.platform.device == "cuda" and cfg.model.name == "gemma4_tiny" and cfg.model.dtype == "float32" and not named


def main(argv: list[str] | None = None, opts: argparse.Namespace | None = None) -> int:
    """argv: overrides and --options; with opts (already parsed), argv holds only the overrides."""
    from kselect.gemma4.engine import Engine, EngineConfig, MultimodalUnsupportedError, max_rel_error, reference_groups
    from kselect.selector.export.render import table

    overrides, opts = parse(sys.argv[1:] if argv is None else argv) if opts is None else (list(argv or ()), opts)
    t_start = time.perf_counter()
    cfg, sel = select(overrides)
    if gpu_tiny_in_bf16(cfg, overrides):
        overrides = [*overrides, "model.dtype=bfloat16"]
        cfg, sel = select(overrides)
        print("model.dtype=bfloat16: on a GPU the bundled tiny model runs in bf16 so that the selected GPU kernels "
              "run (in fp32 only TRITON_ATTN accepts it); pass model.dtype=float32 to keep fp32")
    print(table(sel))
    print()
    if cfg.model.architecture != "gemma4":
        raise RunError(f"kselect run runs the bundled Gemma-4 only: model={cfg.model.name} ({cfg.model.hf_architecture}) is "
                       "selected and explained above (kselect select / explain / diff), not run; allowed: a Gemma-4 "
                       "preset (gemma4_tiny, gemma4_e2b, gemma4_e4b, gemma4_26b_a4b, gemma4_31b)")

    model, tok, source = build_model(cfg, opts.seed)
    args = model.args
    if opts.drafter is not None:  # before the run: a bad folder is found in a second, not after the whole job
        check_drafter(cfg, opts.drafter, args)
    if model.device.type == "cpu" and sum(p.numel() for p in model.parameters()) < 5e7:
        torch.set_num_threads(1)  # tiny matmuls: threads only add OpenMP spin-waits on shared cores
    texts = opts.prompt or DEFAULT_PROMPTS
    prompts = encode(tok, texts, args.bos_token_id)
    mm_spans = None
    if cfg.model.multimodal:  # vision mode: a placeholder image after BOS in every prompt
        img = (1, 1 + IMAGE_TOKENS)
        prompts = [p[:1] + [args.pad_token_id] * IMAGE_TOKENS + p[1:] for p in prompts]
        mm_spans = [[img] for _ in prompts]
        print(f"multimodal (vision mode): no vision tower, so tokens [{img[0]}, {img[1]}) of every prompt are "
              f"{IMAGE_TOKENS} placeholder image tokens (pad id {args.pad_token_id}), marked as one bidirectional "
              f"image span [{img[0]}, {img[1]}) (sliding layers, window {args.sliding_window}; full layers causal)")
    if opts.prefill_chunk:
        try:
            prefill_steps(prompts, mm_spans, opts.prefill_chunk)
        except ValueError as e:  # an image span longer than a chunk: bad input, not a crash
            raise RunError(f"--prefill-chunk {opts.prefill_chunk}: {e}; use --prefill-chunk >= {IMAGE_TOKENS} with "
                           f"model.multimodal=true (its placeholder image span is {IMAGE_TOKENS} tokens)") from None
    check_context(prompts, opts.max_new_tokens, args.max_position_embeddings, cfg)
    max_len = max(map(len, prompts)) + max(opts.max_new_tokens, WARMUP_TOKENS)
    max_len = max(max_len, max(map(len, encode(tok, CALIBRATION_TEXT, args.bos_token_id))))
    cuda_graphs = False if opts.no_cuda_graphs else None
    eng = Engine(model, sel, EngineConfig(max_seqs=max(len(prompts), len(CALIBRATION_TEXT)), max_seq_len=max_len,
                                          cuda_graphs=cuda_graphs, max_step_tokens=opts.prefill_chunk))
    print(f"model {cfg.model.name} ({args.dtype}) from {source} on {model.device}")
    print("attention backend per group: " + ", ".join(
        f"{g} -> {name}" for g, name in eng.backend_names().items()))

    fp8 = eng.cache.fp8
    if fp8 and cfg.kv_cache.scales == "calibrated":
        scales = eng.calibrate(encode(tok, CALIBRATION_TEXT, args.bos_token_id))
        ks = [s[0] for s in scales.values()]
        print(f"calibrated FP8 KV scales over {len(scales)} layers: k_scale {min(ks):.3g}..{max(ks):.3g}")

    try:
        eng.generate(prompts, WARMUP_TOKENS, temperature=opts.temperature, top_k=opts.top_k, seed=opts.seed,
                     mm_spans=mm_spans)  # warm-up
    except MultimodalUnsupportedError as e:  # never a silent causal fallback
        raise RunError(f"model.multimodal=true: {e}") from None
    res = eng.generate(prompts, opts.max_new_tokens, temperature=opts.temperature, top_k=opts.top_k,
                       seed=opts.seed, return_logits=not opts.no_check, mm_spans=mm_spans)
    mode = "greedy" if opts.temperature <= 0 else f"sampled (T={opts.temperature}, top_k={opts.top_k}, seed={opts.seed})"
    print(f"\ngenerated {mode}, {len(prompts)} prompts, up to {opts.max_new_tokens} new tokens:")
    for text, toks in zip(texts, res.tokens):
        print(f"  {text!r} -> {tok.decode(toks)!r}")
    print(f"\nprefill: {res.prompt_tokens} tokens in {res.prefill_s * 1e3:.1f} ms = {res.prefill_tok_s:,.0f} tokens/s")
    print(f"decode:  {res.decode_tokens} tokens in {res.decode_s * 1e3:.1f} ms = {res.decode_tok_s:,.0f} tokens/s "
          f"(batch {len(prompts)}, CUDA graphs {'on' if res.cuda_graphs else 'off'})")
    for n in res.notes:
        print(f"note: {n}")
    for line in chunking_lines(eng, prompts, mm_spans):  # --prefill-chunk: what chunking did
        print(line)

    failed = False
    if not opts.no_check:
        from kselect.gemma4.attention_check import check_attention

        forced = [list(col) for col in zip(*res.steps)]
        same = reference_groups(eng.groups)
        checks = check_attention(model, eng.groups, prompts, forced, max_len=max_len, kv_scales=eng.cache.scales(),
                                 mm_spans=mm_spans)
        compared = [c for c in checks if c.checked]
        if not compared:
            print("\nnumerics: not checked: every group runs TORCH_REFERENCE, the reference itself (nothing to compare "
                  "against; on a GPU the selected kernels are compared call by call)")
        else:
            failed = not all(c.ok for c in checks)
            print(f"\nnumerics: each attention call of the selected backends vs TORCH_REFERENCE on the same inputs "
                  f"({len(res.steps)} teacher-forced steps): {'FAILED' if failed else 'ok'}")
            for c in checks:
                print(f"  {c.line()}")
            cfg_ref = EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, kv_scales=eng.cache.scales(),
                                   cuda_graphs=False)
            r = Engine(model, same, cfg_ref).generate(prompts, len(res.steps), forced=forced, return_logits=True,
                                                      stop_at_eos=False, mm_spans=mm_spans)
            got = torch.stack(res.logits)
            drift = max_rel_error(got, torch.stack(r.logits))
            print(f"numerics: end-to-end logits vs an all-TORCH_REFERENCE run: max rel err {drift:.2e} (per-call errors "
                  f"compounded over {args.num_hidden_layers} layers; information, not the verdict)")
        if fp8:
            got = torch.stack(res.logits)
            plain = {k: g.model_copy(update=dict(kv_cache_dtype=args.dtype, descale="none", kv_scales="none"))
                     for k, g in same.items()}
            r2 = Engine(model, plain, EngineConfig(max_seqs=len(prompts), max_seq_len=max_len,
                                                   cuda_graphs=False)).generate(
                prompts, len(res.steps), forced=forced, return_logits=True, stop_at_eos=False, mm_spans=mm_spans)
            err2 = max_rel_error(got, torch.stack(r2.logits))
            print(f"numerics: max rel logit error vs TORCH_REFERENCE with a {args.dtype} KV cache: {err2:.2e} "
                  f"(FP8 quantization error of this random model)")
    if cfg.spec_decode.method == "mtp":  # the MTP drafter next to plain decoding (kselect/run_mtp.py)
        from kselect.run_mtp import report_mtp

        report_mtp(cfg, sel, eng, prompts, res, max_new_tokens=opts.max_new_tokens, temperature=opts.temperature,
                   top_k=opts.top_k, seed=opts.seed, drafter_checkpoint=opts.drafter, mm_spans=mm_spans)
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")
    return 1 if failed else 0


def _bounded(kind, lo, hi):
    """An argparse type: a number of `kind` in [lo, hi] (nothing is allocated from an unchecked number)."""

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"want a {kind.__name__} in [{lo}, {hi}], got {text!r}") from None
        if not lo <= v <= hi:  # also false for nan
            raise argparse.ArgumentTypeError(f"want a {kind.__name__} in [{lo}, {hi}], got {text!r}")
        return v

    return parse


def _positive_int(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1 << 20:
        raise argparse.ArgumentTypeError(f"want a positive token count, got {text!r}")
    return int(text)


def user_errors(fn):
    """fn(argv) with the runner's own errors (RunError, CheckpointError, DrafterError, a missing kernel package)
    turned into KSelectError: the CLI prints them as one paragraph, exit 2."""
    from kselect.backends.base import BackendUnavailableError
    from kselect.gemma4.checkpoint import CheckpointError
    from kselect.gemma4.config import DrafterError
    from kselect.selector.base.errors import KSelectError

    def wrapped(*args) -> int:
        try:
            return fn(*args)
        except (RunError, CheckpointError, BackendUnavailableError) as e:
            raise KSelectError(str(e)) from e
        except DrafterError as e:  # --drafter's tensors (its config.json is checked before the run)
            raise KSelectError(f"--drafter: {e}") from e

    return wrapped


def script_main(fn) -> None:
    """A script that drives the run (bench/, the e2e harness) exits through here: every error is exit 2 and one
    paragraph (selector/base/cli_errors.py). `kselect run` itself is kselect/commands/run.py."""
    from kselect.selector.base.cli_errors import call_main

    sys.exit(call_main(user_errors(fn), sys.argv[1:]))
