"""The main job as a library: `run(overrides, RunOptions(...))` selects kernels for the composed config, builds the
bundled Gemma-4 on them, generates, prints what it did and checks the selected kernels' numerics. `kselect run`
(kselect/commands/run.py, whose module docstring lists the steps) maps its command line onto RunOptions; the
measurement drivers call the same pieces (gemma4/build.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from kselect.gemma4.build import (CALIBRATION_TEXT, DEFAULT_PROMPTS, RunError, build_model,
                                   encode, select)
from kselect.gemma4.chunk_report import chunking_lines, prefill_steps

# model.multimodal=true: no vision tower here, so every prompt gets this many placeholder "image" tokens
# (the pad id, which is what HF embeds at image slots before merging vision features) right after BOS,
# marked as one bidirectional image span.
IMAGE_TOKENS = 20
WARMUP_TOKENS = 2  # the warm-up generation before the timed one


@dataclass(frozen=True)
class RunOptions:
    """What one main job runs, besides the config's overrides (kselect/commands/run.py maps its flags, with their
    help and bounds, onto these fields)."""

    prompts: tuple[str, ...] = ()  # empty: DEFAULT_PROMPTS
    max_new_tokens: int = 24
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0
    seed: int = 0  # sampling seed (and the random-weight seed)
    cuda_graphs: bool = True  # False: never; True: where every backend supports them
    prefill_chunk: int | None = None  # prefill prompts in steps of this many tokens
    check: bool = True  # the TORCH_REFERENCE numerics check
    drafter: str | None = None  # spec_decode=mtp: an HF Gemma4AssistantForCausalLM folder


@dataclass
class _Job:
    """What the run built, read by the report and the numerics check."""

    cfg: object
    sel: object
    model: torch.nn.Module
    tok: object
    texts: list[str]
    prompts: list[list[int]]
    mm_spans: list | None
    max_len: int
    engine: object


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


def gpu_tiny_in_bf16(cfg, overrides: list[str]) -> bool:
    """The tiny model's preset dtype is fp32 (for CPUs); on CUDA the main job runs it in bf16, unless
    the command line names a dtype."""
    named = any(o.lstrip("+~").startswith("model.dtype=") for o in overrides)
    return cfg.platform.device == "cuda" and cfg.model.name == "gemma4_tiny" and cfg.model.dtype == "float32" and not named


def run(overrides: list[str], opts: RunOptions) -> int:
    """The main job; 1 where a selected kernel's numerics failed the check, else 0. Bad input raises RunError,
    CheckpointError, DrafterError or BackendUnavailableError (the command turns them into exit 2)."""
    t_start = time.perf_counter()
    job = _build(*_selection(list(overrides)), opts)
    res = _generate(job, opts)
    _print_generation(job, opts, res)
    failed = _check_numerics(job, res) if opts.check else False
    if job.cfg.spec_decode.method == "mtp":  # the MTP drafter next to plain decoding (kselect/run_mtp.py)
        from kselect.run_mtp import report_mtp

        report_mtp(job.cfg, job.sel, job.engine, job.prompts, res, max_new_tokens=opts.max_new_tokens,
                   temperature=opts.temperature, top_k=opts.top_k, seed=opts.seed, drafter_checkpoint=opts.drafter,
                   mm_spans=job.mm_spans)
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")
    return 1 if failed else 0


def _selection(overrides: list[str]):
    """The composed config and its selection, printed as a table; the bundled model only."""
    from kselect.selector.export.render import table

    cfg, sel = select(overrides)
    if cfg.output != "table":
        raise RunError(f"run: output={cfg.output}: kselect run prints the selection as a table, then what the model "
                       f"generated; allowed: table (kselect select output={cfg.output} renders the selection alone)")
    if gpu_tiny_in_bf16(cfg, overrides):
        overrides = [*overrides, "model.dtype=bfloat16"]
        cfg, sel = select(overrides)
        print("model.dtype=bfloat16: on a GPU the bundled tiny model runs in bf16 so that the selected GPU kernels "
              "run (in fp32 only TRITON_ATTN accepts it); pass model.dtype=float32 to keep fp32")
    print(table(sel, cfg.verbose))
    print()
    if cfg.model.architecture != "gemma4":
        raise RunError(f"kselect run runs the bundled Gemma-4 only: model={cfg.model.name} ({cfg.model.hf_architecture}) is "
                       "selected and explained above (kselect select / explain / diff), not run; allowed: a Gemma-4 "
                       "preset (gemma4_tiny, gemma4_e2b, gemma4_e4b, gemma4_26b_a4b, gemma4_31b)")
    return cfg, sel


def _build(cfg, sel, opts: RunOptions) -> _Job:
    """The model, its prompts (checked against its context) and the engine on the selection."""
    from kselect.gemma4.engine import Engine, EngineConfig

    model, tok, source = build_model(cfg, opts.seed)
    args = model.args
    if opts.drafter is not None:  # before the run: a bad folder is found in a second, not after the whole job
        check_drafter(cfg, opts.drafter, args)
    if model.device.type == "cpu" and sum(p.numel() for p in model.parameters()) < 5e7:
        torch.set_num_threads(1)  # tiny matmuls: threads only add OpenMP spin-waits on shared cores
    texts = list(opts.prompts) or DEFAULT_PROMPTS
    prompts, mm_spans = _prompts(cfg, args, encode(tok, texts, args.bos_token_id), opts.prefill_chunk)
    check_context(prompts, opts.max_new_tokens, args.max_position_embeddings, cfg)
    max_len = max(map(len, prompts)) + max(opts.max_new_tokens, WARMUP_TOKENS)
    max_len = max(max_len, max(map(len, encode(tok, CALIBRATION_TEXT, args.bos_token_id))))
    eng = Engine(model, sel, EngineConfig(max_seqs=max(len(prompts), len(CALIBRATION_TEXT)), max_seq_len=max_len,
                                          cuda_graphs=None if opts.cuda_graphs else False,
                                          max_step_tokens=opts.prefill_chunk))
    print(f"model {cfg.model.name} ({args.dtype}) from {source} on {model.device}")
    print("attention backend per group: " + ", ".join(f"{g} -> {name}" for g, name in eng.backend_names().items()))
    return _Job(cfg, sel, model, tok, texts, prompts, mm_spans, max_len, eng)


def _prompts(cfg, args, prompts: list[list[int]], prefill_chunk: int | None):
    """The encoded prompts with model.multimodal's placeholder image after BOS, and their image spans."""
    mm_spans = None
    if cfg.model.multimodal:  # vision mode: a placeholder image after BOS in every prompt
        img = (1, 1 + IMAGE_TOKENS)
        prompts = [p[:1] + [args.pad_token_id] * IMAGE_TOKENS + p[1:] for p in prompts]
        mm_spans = [[img] for _ in prompts]
        print(f"multimodal (vision mode): no vision tower, so tokens [{img[0]}, {img[1]}) of every prompt are "
              f"{IMAGE_TOKENS} placeholder image tokens (pad id {args.pad_token_id}), marked as one bidirectional "
              f"image span [{img[0]}, {img[1]}) (sliding layers, window {args.sliding_window}; full layers causal)")
    if prefill_chunk:
        try:
            prefill_steps(prompts, mm_spans, prefill_chunk)
        except ValueError as e:  # an image span longer than a chunk: bad input, not a crash
            raise RunError(f"--prefill-chunk {prefill_chunk}: {e}; use --prefill-chunk >= {IMAGE_TOKENS} with "
                           f"model.multimodal=true (its placeholder image span is {IMAGE_TOKENS} tokens)") from None
    return prompts, mm_spans


def _generate(job: _Job, opts: RunOptions):
    """FP8 scales calibrated where asked, a warm-up, then the timed generation (with logits for the check)."""
    from kselect.gemma4.engine import MultimodalUnsupportedError

    eng, args = job.engine, job.model.args
    if eng.cache.fp8 and job.cfg.kv_cache.scales == "calibrated":
        scales = eng.calibrate(encode(job.tok, CALIBRATION_TEXT, args.bos_token_id))
        ks = [s[0] for s in scales.values()]
        print(f"calibrated FP8 KV scales over {len(scales)} layers: k_scale {min(ks):.3g}..{max(ks):.3g}")
    sampling = dict(temperature=opts.temperature, top_k=opts.top_k, seed=opts.seed, mm_spans=job.mm_spans)
    try:
        eng.generate(job.prompts, WARMUP_TOKENS, **sampling)  # warm-up
    except MultimodalUnsupportedError as e:  # never a silent causal fallback
        raise RunError(f"model.multimodal=true: {e}") from None
    return eng.generate(job.prompts, opts.max_new_tokens, return_logits=opts.check, **sampling)


def _print_generation(job: _Job, opts: RunOptions, res) -> None:
    """The outputs, prefill and decode tokens/s, the engine's notes and what chunked prefill did."""
    mode = "greedy" if opts.temperature <= 0 else f"sampled (T={opts.temperature}, top_k={opts.top_k}, seed={opts.seed})"
    print(f"\ngenerated {mode}, {len(job.prompts)} prompts, up to {opts.max_new_tokens} new tokens:")
    for text, toks in zip(job.texts, res.tokens):
        print(f"  {text!r} -> {job.tok.decode(toks)!r}")
    print(f"\nprefill: {res.prompt_tokens} tokens in {res.prefill_s * 1e3:.1f} ms = {res.prefill_tok_s:,.0f} tokens/s")
    print(f"decode:  {res.decode_tokens} tokens in {res.decode_s * 1e3:.1f} ms = {res.decode_tok_s:,.0f} tokens/s "
          f"(batch {len(job.prompts)}, CUDA graphs {'on' if res.cuda_graphs else 'off'})")
    for n in res.notes:
        print(f"note: {n}")
    for line in chunking_lines(job.engine, job.prompts, job.mm_spans):  # --prefill-chunk: what chunking did
        print(line)


def _check_numerics(job: _Job, res) -> bool:
    """Each attention call of the selected backends against TORCH_REFERENCE on the same inputs (the verdict), the
    end-to-end drift against an all-reference run and, for an FP8 cache, against an unquantized one; True: failed."""
    from kselect.gemma4.attention_check import check_attention

    forced = [list(col) for col in zip(*res.steps)]
    checks = check_attention(job.model, job.engine.groups, job.prompts, forced, max_len=job.max_len,
                             kv_scales=job.engine.cache.scales(), mm_spans=job.mm_spans)
    failed = False
    if not any(c.checked for c in checks):
        print("\nnumerics: not checked: every group runs TORCH_REFERENCE, the reference itself (nothing to compare "
              "against; on a GPU the selected kernels are compared call by call)")
    else:
        failed = not all(c.ok for c in checks)
        print(f"\nnumerics: each attention call of the selected backends vs TORCH_REFERENCE on the same inputs "
              f"({len(res.steps)} teacher-forced steps): {'FAILED' if failed else 'ok'}")
        for c in checks:
            print(f"  {c.line()}")
        drift = _logit_error(job, res, forced, job.engine.cache.scales(), fp8_plain=False)
        print(f"numerics: end-to-end logits vs an all-TORCH_REFERENCE run: max rel err {drift:.2e} (per-call errors "
              f"compounded over {job.model.args.num_hidden_layers} layers; information, not the verdict)")
    if job.engine.cache.fp8:
        err = _logit_error(job, res, forced, None, fp8_plain=True)
        print(f"numerics: max rel logit error vs TORCH_REFERENCE with a {job.model.args.dtype} KV cache: {err:.2e} "
              f"(FP8 quantization error of this random model)")
    return failed


def _logit_error(job: _Job, res, forced: list[list[int]], kv_scales, *, fp8_plain: bool) -> float:
    """The run's logits against a TORCH_REFERENCE run teacher-forced on its tokens: on the same cache (kv_scales:
    its FP8 scales) or, fp8_plain, on a cache in the model's dtype."""
    from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error, reference_groups

    groups = reference_groups(job.engine.groups)
    if fp8_plain:
        groups = {k: g.model_copy(update=dict(kv_cache_dtype=job.model.args.dtype, descale="none", kv_scales="none"))
                  for k, g in groups.items()}
    config = EngineConfig(max_seqs=len(job.prompts), max_seq_len=job.max_len, kv_scales=kv_scales, cuda_graphs=False)
    ref = Engine(job.model, groups, config).generate(job.prompts, len(res.steps), forced=forced, return_logits=True,
                                                     stop_at_eos=False, mm_spans=job.mm_spans)
    return max_rel_error(torch.stack(res.logits), torch.stack(ref.logits))
