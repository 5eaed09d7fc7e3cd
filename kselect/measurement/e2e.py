"""Gemma-4 end to end: our engine on the selected kernels vs Hugging Face transformers, same weights.

    python -m kselect.measurement.e2e --out $OUT/e2e --budget-s 540 [--presets gemma4_e4b gemma4_31b]
    python -m kselect.measurement.e2e --smoke --out /tmp/e2e          # CPU, gemma4_tiny, seconds
    kselect bench experiment=<name>                                   # a recorded run (bench/conf/experiment/)

Per preset (seeded random weights in the model dtype, built on the device; freed between presets):
  * every selection (base, overlay=[pr48666], overlay=[pr53175]; `--selections ... pin_triton` adds
    attention.backend=TRITON_ATTN, a same-run baseline) x KV dtype (auto = model dtype, fp8):
    the backend per group, the KV-cache capacity in a fixed budget (--capacity-gib; non-shared layers
    x 2 x kv_heads x head_size x bytes, whole kv blocks), and the numerics check: max rel logit error
    of the selected kernels vs TORCH_REFERENCE on the same cache layout/dtype (prefill past the
    sliding window, then a few teacher-forced decode steps). A WRONG verdict is reported, not hidden:
    the run still measures everything, then exits with status 1 naming each WRONG selection.
    Selections that resolve to the same groups are measured once (`same_as`). A selected backend whose
    kernel is not installed is reported as that selection's error, never substituted.
  * prefill tokens/s (--prompt-len, random tokens) and decode tokens/s (--new tokens, greedy, CUDA
    graphs) at each batch size, after a warm-up: CUDA events, median of --reps runs;
  * the same weights in HF transformers (attn_implementation="sdpa"), built on the meta device and
    loaded with `assign=True` (tensors shared with our model, not copied); last-token logits are
    checked against our model before timing; prefill = model(ids, logits_to_keep=1), decode =
    (generate(--hf-new tokens) - prefill) / (hf_new - 1) steps.
Results go to --out/e2e.json and e2e.md after every measurement (a timeout still leaves them).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform as _platform
import statistics
import sys
import time
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, field_validator

from kselect.measurement.e2e_report import HF, OBJECTIVES, WRONG, Report, fnum, measured_as, objective_table, sel_label
from kselect.measurement.step_profile import free, profile_decode, profile_prefill
from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error, model_groups, reference_groups
from kselect.gemma4.host_threads import serving_threads
from kselect.gemma4.kv_cache import group_blocks, kv_torch_dtype
from kselect.gemma4.graphs import DEFAULT_MAX_TOKENS, check_max_tokens

# base, pr48666, pr53175: the seed's story (rules=post_pr52987 and its overlays); vllm_0_33_0: the default rules
SEED = "rules=post_pr52987"
# torch's intra-op threads before any engine shrinks them (gemma4/host_threads.py: one on a GPU, process-wide): HF's
# baseline runs on these, as users run HF, not on the engines' serving thread
HF_THREADS = torch.get_num_threads()
VLLM_KERNELS_ONLY = ["platform.packages.kselect_triton=false", "platform.packages.fa3_upstream=false"]
SELECTIONS = {"base": [SEED], "pr48666": [SEED, "overlay=[pr48666]"], "pr53175": [SEED, "overlay=[pr53175]"],
              "vllm_0_33_0": ["rules=vllm_0_33_0"],
              # same-run baselines: one backend for every group
              "pin_triton": [SEED, "attention.backend=TRITON_ATTN"],
              "pin_flashinfer": [SEED, "attention.backend=FLASHINFER"], "pin_fa": [SEED, "attention.backend=FLASH_ATTN"],
              "pin_fa3": [SEED, "attention.backend=FLASH_ATTN", "attention.flash_attn_version=3"],
              "pin_fa4": [SEED, "attention.backend=FLASH_ATTN", "attention.flash_attn_version=4"],
              # objective=vllm under --rules (the same rules as the objectives'): vLLM's own choice
              "vllm": [SEED],
              # selection by measurement (conf/perf/<gpu>.yaml): per group and phase, the fastest verified kernel
              "latency": [SEED, "objective=latency"], "throughput": [SEED, "objective=throughput"],
              # the objectives over the kernels vLLM ships only (no TRITON_ATTN+kselect, no FLASH_ATTN v3+upstream)
              "latency_vllm": [SEED, "objective=latency", *VLLM_KERNELS_ONLY],
              "throughput_vllm": [SEED, "objective=throughput", *VLLM_KERNELS_ONLY],
              # vLLM's own selection measured a second time, never folded into `vllm` (same_as): its spread from
              # `vllm` is this run's noise band (kselect/measurement/e2e_report.py)
              "vllm_twin": [SEED]}
DEFAULT_SELECTIONS = ["base", "pr48666", "pr53175"]
KV_DTYPES = ["auto", "fp8"]
PROFILE_STEPS = 8  # B1 decode steps profiled per selection
PROFILE_PREFILLS = 3  # B1 prefills of --prompt-len profiled per selection


def selection_overrides(name: str, rules: str) -> list[str]:
    """A selection's Hydra overrides with the seed's rules replaced by `rules` (a selection naming its own rules,
    like vllm_0_33_0, keeps them)."""
    return [f"rules={rules}" if o == SEED else o for o in SELECTIONS[name]]


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


# ---------------------------------------------------------------------------- environment
def environment(argv: list[str], script: str = "-m kselect.measurement.e2e", command: str | None = None) -> dict:
    """The run's command (`command`, or `script` with argv), the project's commit, versions, the device."""
    from kselect.provenance import project_commit, versions  # the project's commit, not an enclosing repo's

    own = project_commit()
    env = dict(command=command or " ".join([sys.executable.rsplit("/", 1)[-1], script, *argv]),
               git_commit=own["commit"], git_dirty=own["dirty"], commit_source=own["commit_source"], versions=versions(),
               torch=str(torch.__version__), python=_platform.python_version(), host=_platform.node(),
               date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    for mod in ("transformers", "triton"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            env[mod] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), gpu_mem_gib=round(p.total_memory / 2**30, 1),
                   cuda=torch.version.cuda, capability=f"{p.major}.{p.minor}",
                   host_threads=serving_threads("cuda") or torch.get_num_threads(),  # the engines serve with
                   hf_threads=HF_THREADS)
    else:
        env.update(gpu=None, cpu_threads=torch.get_num_threads())
    return env


def ceilings(device: torch.device) -> dict:
    """Measured copy bandwidth (read+write) and bf16 GEMM throughput: the roofs for plots."""
    if device.type != "cuda":
        return {}
    n = 1 << 30
    a = torch.randn(n // 2, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    m = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    out = {}
    for key, fn, work in (("copy_gbs", lambda: b.copy_(a), 2 * n / 1e9), ("bf16_gemm_tflops", lambda: m @ m, 2 * 8192**3 / 1e12)):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        out[key] = round(work / statistics.median(ts), 1)
    del a, b, m
    torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------------------- selections
def describe(groups) -> dict:
    out = {}
    for g in groups.values():
        out[g.kind] = dict(backend=g.label, kernel_block=g.kernel_block_size, kv_block=g.kv_block_size,
                           kv_dtype=g.kv_cache_dtype, quant_query=g.quant_query, descale=g.descale,
                           head_size=g.head_size, kv_heads=g.num_kv_heads, layers=len(g.layers))
        if g.prefill is not None:  # objective selections: prefill on another backend over the same cache
            p = g.prefill
            out[g.kind]["prefill_backend"] = p.label
    return out


def signature(groups) -> tuple:
    return tuple(sorted((k, g.backend, g.flash_attn_version, g.build, g.kernel_block_size, g.kv_block_size, g.kv_cache_dtype,
                         g.quant_query, g.descale, g.kv_scales,
                         signature({k: g.prefill}) if g.prefill is not None else None) for k, g in groups.items()))


def capacity(args, groups, model_dtype, budget_gib: float, prefill_chunk: int = 2048) -> dict:
    """Tokens per sequence-independent pool that fit in budget_gib: every group holds every token
    (full-length paged cache, as PagedKVCache allocates), rounded down to whole kv blocks. Also
    `one_sequence_windowed`: the longest single sequence that fits when prompts prefill in chunks of
    `prefill_chunk` (Engine max_step_tokens), so the sliding group holds only its window."""
    per, blocks = {}, []
    for g in groups.values():
        producers = [i for i in g.layers if not args.is_kv_shared(i)]
        elem = torch.empty((), dtype=kv_torch_dtype(g.kv_cache_dtype, model_dtype)).element_size()
        per[g.kind] = dict(producer_layers=len(producers),
                           bytes_per_token=len(producers) * 2 * g.num_kv_heads * g.head_size * elem,
                           kv_block=g.kv_block_size)
        blocks.append(g.kv_block_size)
    total = sum(p["bytes_per_token"] for p in per.values())
    step = math.lcm(*blocks)
    budget = budget_gib * 2**30
    tokens = int(budget // total) // step * step
    while tokens and sum(math.ceil(tokens / p["kv_block"]) * p["kv_block"] * p["bytes_per_token"]
                         for p in per.values()) > budget:
        tokens -= step

    def windowed_bytes(n):  # PagedKVCache's pools for one sequence of n tokens, chunked prefill
        return sum(group_blocks(p["kv_block"], n, 1, args.sliding_window if k == "sliding_window" else None,
                                prefill_chunk) * p["kv_block"] * p["bytes_per_token"] for k, p in per.items())

    lo, hi = 0, 1 << 40  # the largest block multiple that fits: bytes grow with n
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if windowed_bytes(mid) <= budget else (lo, mid)
    return dict(budget_gib=budget_gib, bytes_per_token=total, tokens=tokens, groups=per,
                one_sequence_windowed=dict(prefill_chunk=prefill_chunk, tokens=lo))


# ---------------------------------------------------------------------------- measurements
def numerics_check(model, groups, prompts, steps: int, graphs) -> dict:
    """The verdict: every attention call of the selected kernels vs TORCH_REFERENCE on the same inputs,
    each kernel at its own bar (gemma4/attention_check.py). Also recorded: end-to-end logits vs an
    all-reference run on the same cache layout and dtype (teacher-forced), drift that compounds over
    the layers (information; the per-kernel bar does not apply to it)."""
    from kselect.gemma4.attention_check import check_attention
    from kselect.kernels.tolerances import tolerance

    max_len = max(map(len, prompts)) + steps + 1
    eng = Engine(model, groups, EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, cuda_graphs=graphs))
    res = eng.generate(prompts, steps + 1, return_logits=True, stop_at_eos=False)
    forced = [list(col) for col in zip(*res.steps)]
    ref = Engine(model, reference_groups(eng.groups), EngineConfig(max_seqs=len(prompts), max_seq_len=max_len,
                                                                   kv_scales=eng.cache.scales(), cuda_graphs=False))
    r = ref.generate(prompts, len(res.steps), forced=forced, return_logits=True, stop_at_eos=False)
    got, want = torch.stack(res.logits), torch.stack(r.logits)  # [steps, B, V]
    fp8 = eng.cache.fp8
    tol = tolerance(model.dtype, fp8=fp8)
    err = max_rel_error(got, want)
    out = dict(max_rel_err=err, prefill_rel_err=max_rel_error(got[:1], want[:1]),
               decode_rel_err=max_rel_error(got[1:], want[1:]) if len(got) > 1 else None,
               logits_tolerance_info=tol, steps=len(res.steps),
               prompt_lens=[len(p) for p in prompts], cuda_graphs=res.cuda_graphs,
               argmax_agree=float((got.argmax(-1) == want.argmax(-1)).float().mean()), notes=res.notes)
    checks = check_attention(model, eng.groups, prompts, forced, max_len=max_len, kv_scales=eng.cache.scales())
    out["attention_calls"] = [dict(group=c.group, backend=c.backend, calls=c.calls, max_rel_err=c.worst,
                                   tolerance=c.tolerance, checked=c.checked, ok=c.ok) for c in checks]
    out["tolerance"] = max((c.tolerance for c in checks if c.checked), default=tol)
    out["verdict"] = "ok" if all(c.ok for c in checks) else WRONG
    out["attention_max_rel_err"] = max((c.worst for c in checks if c.checked), default=None,
                                       key=lambda e: math.inf if math.isnan(e) else e)
    if fp8:  # how far the FP8 cache itself is from a model-dtype cache (the quantization error)
        mdt = str(model.dtype).removeprefix("torch.")
        plain = {k: g.model_copy(update=dict(kv_cache_dtype=mdt, descale="none", kv_scales="none"))
                 for k, g in reference_groups(eng.groups).items()}
        r2 = Engine(model, plain, EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, cuda_graphs=False)).generate(
            prompts, len(res.steps), forced=forced, return_logits=True, stop_at_eos=False)
        out["fp8_quant_rel_err"] = max_rel_error(want, torch.stack(r2.logits))
    del eng, ref
    free()
    return out


def time_engine(model, groups, prompts, new: int, reps: int, graphs) -> dict:
    b = len(prompts)
    eng = Engine(model, groups, EngineConfig(max_seqs=b, max_seq_len=len(prompts[0]) + new, cuda_graphs=graphs))
    t = time.perf_counter()
    eng.generate(prompts, 3, stop_at_eos=False)  # warm-up: kernel compiles, graph capture
    warm_s = time.perf_counter() - t
    pre, dec, steps = [], [], None
    for _ in range(reps):
        r = eng.generate(prompts, new, stop_at_eos=False)
        pre.append(r.prefill_s)
        dec.append(r.decode_s)
        steps = r.decode_tokens // b
    p, d = statistics.median(pre), statistics.median(dec)
    out = dict(prefill_tok_s=r.prompt_tokens / p, decode_tok_s=b * steps / d, prefill_ms=p * 1e3,
               decode_tok_s_reps=[round(b * steps / x, 2) for x in dec],
               decode_ms_per_step=d / steps * 1e3, decode_steps=steps, reps=reps, warmup_s=round(warm_s, 2),
               cuda_graphs=r.cuda_graphs, prefill_graph_steps=eng.prefill_graph_steps, notes=r.notes,
               kv_cache_gib=round(eng.cache.bytes() / 2**30, 3))
    del eng
    free()
    return out


def time_prefill(model, groups, prompt: list[int], reps: int, chunk: int | None = None) -> dict:
    """One prompt's prefill (B1), whole or in chunks of `chunk` tokens (Engine max_step_tokens)."""
    eng = Engine(model, groups, EngineConfig(max_seqs=1, max_seq_len=len(prompt) + 1, cuda_graphs=False,
                                             max_step_tokens=chunk))
    eng.generate([prompt], 1, stop_at_eos=False)  # warm-up: kernel compiles
    ts = [eng.generate([prompt], 1, stop_at_eos=False).prefill_s for _ in range(reps)]
    p = statistics.median(ts)
    del eng
    free()
    return dict(prefill_tok_s=len(prompt) / p, prefill_ms=p * 1e3, reps=reps, chunk=chunk)


def profile_attention(model, groups, prompt: list[int], steps: int) -> dict:
    """Device ms per B1 decode step by kernel category (bench/gemma4/fusion.py's profile): the attention
    share is what `kselect explain` predicts from conf/perf. Taken of the CUDA-graph replays the run
    decodes with (kernels named as attention, quant-query included) and of eager steps (every kernel the
    attention backends' forward calls launched, by profiler range); eager alone where a selection does
    not capture graphs or the profiler saw no graph kernels."""
    layers = model.args.num_hidden_layers
    r = profile_decode(model, groups, prompt, steps, layers)
    g = profile_decode(model, groups, prompt, steps, layers, graphs=True)
    graph_ok = g["graphs"] and g["kernels_per_step"] > layers  # replayed, and CUPTI listed the graph's kernels
    main = g if graph_ok else r
    return dict(attention_ms_per_step=main["ms_per_step"]["attention"], kernel_ms_per_step=main["kernel_ms_per_step"],
                kernels_per_step=main["kernels_per_step"], ms_per_step=main["ms_per_step"], mode="graph" if graph_ok else "eager",
                attention_timeline_ms_per_step=main["attention_timeline_ms_per_step"],
                attention_kernels=main["attention_kernels"],  # by name: where explain and the step part
                attention_call_ms_per_step=r["attention_call_ms_per_step"],
                attention_calls_per_step=r["attention_calls_per_step"],
                eager_attention_ms_per_step=r["ms_per_step"]["attention"], steps=steps,
                context=len(prompt) + steps // 2)  # the profiled steps' mean context


@contextlib.contextmanager
def params_on_meta():
    """Build a module with its parameters on the meta device (buffers stay real: RoPE tables etc.)."""
    orig = torch.nn.Module.register_parameter

    def reg(self, name, param):
        orig(self, name, param)
        p = self._parameters.get(name)
        if p is not None and p.device.type != "meta":
            self._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = reg
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = orig


def hf_model(model):
    """HF Gemma4ForCausalLM (sdpa) sharing `model`'s tensors (meta build + load_state_dict(assign=True))."""
    import copy

    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(model.args.to_hf_text_config())
    with params_on_meta():
        hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=model.dtype)
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    res = hf.load_state_dict(sd, strict=False, assign=True)
    if res.unexpected_keys or res.missing_keys != ["lm_head.weight"]:
        raise RuntimeError(f"HF state dict mismatch: missing {res.missing_keys[:5]}, unexpected {res.unexpected_keys[:5]}")
    hf.lm_head.weight = hf.model.embed_tokens.weight  # tied
    hf = hf.to(model.device).eval()  # moves the (real) buffers; assigned parameters are already there
    meta = [n for n, t in list(hf.named_parameters()) + list(hf.named_buffers()) if t.device.type == "meta"]
    if meta:
        raise RuntimeError(f"HF model still has meta tensors: {meta[:5]}")
    ours = {t.data_ptr() for t in model.state_dict().values()}
    shared = sum(p.data_ptr() in ours for p in hf.parameters())
    if shared != len(list(hf.parameters())):
        raise RuntimeError(f"only {shared} of {len(list(hf.parameters()))} HF parameters share our tensors")
    return hf


@torch.inference_mode()
def hf_logits_check(model, hf, ref_groups, prompts) -> dict:
    from kselect.kernels.tolerances import tolerance

    eng = Engine(model, ref_groups, EngineConfig(max_seqs=len(prompts), max_seq_len=len(prompts[0]), cuda_graphs=False))
    ours = eng.extend(list(range(len(prompts))), prompts).float()
    ids = torch.tensor(prompts, device=model.device)
    theirs = hf(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1).logits[:, -1].float()
    err = max_rel_error(ours, theirs)
    tol = 5 * tolerance(model.dtype)  # two independent implementations, each within the dtype's bar
    del eng
    free()
    return dict(max_rel_err=err, tolerance=tol, verdict="ok" if err <= tol else WRONG,
                argmax_agree=float((ours.argmax(-1) == theirs.argmax(-1)).float().mean()),
                what="last-token logits, our model on TORCH_REFERENCE vs HF sdpa, same weights")


@torch.inference_mode()
def timed_s(fn, device) -> float:
    """Seconds one call of fn takes on the device's timeline (CUDA events), or the host's on CPU."""
    if device.type == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@contextlib.contextmanager
def hf_threads():
    """torch's intra-op threads at HF_THREADS while HF is timed, the engines' count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(HF_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Inference mode around the warm-up calls too: HF's parameters require grad, so a forward outside it keeps
# every layer's activations for a backward (31B at 4,096 tokens ran out of memory so).
@torch.inference_mode()
@hf_threads()
def time_hf(hf, prompts, new: int, reps: int, device) -> dict:
    ids = torch.tensor(prompts, device=device)
    am = torch.ones_like(ids)
    b, n = ids.shape
    gen_kw = dict(attention_mask=am, do_sample=False, pad_token_id=0, eos_token_id=None)

    timed = lambda fn: timed_s(fn, device)  # noqa: E731
    prefill = lambda: hf(input_ids=ids, attention_mask=am, logits_to_keep=1)  # noqa: E731
    prefill()
    hf.generate(ids, max_new_tokens=3, min_new_tokens=3, **gen_kw)  # warm-up
    pre = statistics.median(timed(prefill) for _ in range(reps))
    gen = statistics.median(timed(lambda: hf.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen_kw))
                            for _ in range(max(1, reps - 1)))
    dec = max(gen - pre, 1e-9)
    out = dict(prefill_tok_s=b * n / pre, decode_tok_s=b * (new - 1) / dec, prefill_ms=pre * 1e3,
               decode_ms_per_step=dec / (new - 1) * 1e3, generate_s=gen, new_tokens=new)
    free()
    return out


@torch.inference_mode()
@hf_threads()
def time_hf_prefill(hf, n: int, vocab: int, reps: int, device, seed: int) -> dict:
    """HF's B1 prefill of one n-token prompt (logits of the last token only), as time_hf's prefill."""
    ids = torch.randint(3, vocab, (1, n), generator=torch.Generator().manual_seed(seed)).to(device)
    am = torch.ones_like(ids)
    run = lambda: hf(input_ids=ids, attention_mask=am, logits_to_keep=1)  # noqa: E731
    run()
    p = statistics.median(timed_s(run, device) for _ in range(reps))
    free()
    return dict(prefill_tok_s=n / p, prefill_ms=p * 1e3, reps=reps)


def measure(rep, table: str, rec: dict, what: str, log, fn, ok) -> None:
    """One measurement into `rec`, appended to rep.data[table] and saved. A failure is recorded in
    `rec` and logged, not raised (the rest of the run still measures), and memory is freed."""
    try:
        rec.update(fn())
        log(f"{what}: {ok(rec)}")
    except Exception as e:  # noqa: BLE001
        rec["error"] = first_line(e)
        log(f"{what}: FAILED {rec['error']}")
        free()
    rep.data[table].append(rec)
    rep.save()


def run_points(opts, sname: str, batches: list[int]) -> list[str]:
    """The points a selection is resolved for: "" (once, runs everywhere), or with --objective-at-run an
    objective's own operating point per run: "decode B<b>" (that batch's runs, and the B1 run's prefill of
    --prompt-len tokens) and "prefill <n>" (the --prefill-lens prompt of n tokens)."""
    if sname not in OBJECTIVES or not opts.objective_at_run:
        return [""]
    return [f"decode B{b}" for b in batches] + [f"prefill {n}" for n in opts.prefill_lens]


def point_overrides(opts, point: str) -> list[str]:
    """Hydra overrides that put the objective's operating point (conf/objective) at a run's shapes and
    request: decode B x the mean context of its decode steps after a B1 prefill of its prompt, --new
    decode steps a request; a prefill run's request is its prompt alone (0 decode steps)."""
    if not point:
        return []
    kind, _, n = point.partition(" ")
    if kind == "decode":
        b, ctx, prompt, steps = int(n.removeprefix("B")), opts.prompt_len + opts.new // 2, opts.prompt_len, opts.new
    else:
        b, ctx, prompt, steps = 1, int(n), int(n), 0
    return [f"objective.decode.batch={b}", f"objective.decode.context={ctx}", f"objective.prefill.context={prompt}",
            f"objective.new_tokens={steps}"]


def extras(opts, rep, preset, model, todo, args, gen, left, log) -> None:
    """B1 prefill of --prefill-lens prompts per selection, the chunk sweep, attention profiles."""
    longs = {n: torch.randint(3, args.vocab_size, (n,), generator=gen).tolist() for n in opts.prefill_lens}
    for row, groups in todo:
        sname, point = row["selection"], row["point"]
        chunks = [None] + ([c for c in opts.chunk_sweep] if sname in opts.chunk_selections else [])
        for n, prompt in longs.items():
            if point not in ("", f"prefill {n}"):
                continue
            for c in chunks:
                if c is not None and c >= n:
                    continue
                r = dict(preset=preset, selection=sname, kv=row["kv"], prompt_len=n, chunk=c, point=point)
                if left() < 15:
                    rep.data["skipped"].append(f"{preset} {sname} kv={row['kv']} prefill {n} chunk {c}")
                    continue
                measure(rep, "prefills", r, f"{preset} {sname} kv={row['kv']} prefill {n} (chunk {c or 'whole'})", log,
                        lambda: time_prefill(model, groups, prompt, opts.reps, c),  # noqa: B023 (called at once)
                        lambda r: f"{r['prefill_tok_s']:,.0f} tok/s")
        if sname in opts.profile_selections and point in ("", "decode B1") and model.device.type == "cuda":
            if left() < 20:
                rep.data["skipped"].append(f"{preset} {sname} kv={row['kv']} profile")
                continue
            # the profiled steps' mean context is the decode point's (--prompt-len + --new / 2), where explain
            # reads its figures: a B1 decode kernel's time moves with the exact context (FA3's FP8 call: 28 us
            # at 512 tokens, 17 us at 544; bench/results/h200/perf_pages/)
            n = opts.prompt_len + opts.new // 2 - PROFILE_STEPS // 2
            prompt = torch.randint(3, args.vocab_size, (n,), generator=gen).tolist()
            measure(rep, "profiles", dict(preset=preset, selection=sname, kv=row["kv"], point=point),
                    f"{preset} {sname} kv={row['kv']} profile", log,
                    lambda: profile_attention(model, groups, prompt, PROFILE_STEPS),  # noqa: B023 (called at once)
                    lambda p: f"attention {p['attention_ms_per_step']:.3f} ms/step of {p['kernel_ms_per_step']:.2f}")
            # the B1 run's prefill of --prompt-len tokens, where explain reads its prefill figures
            pprompt = torch.randint(3, args.vocab_size, (opts.prompt_len,), generator=gen).tolist()
            measure(rep, "prefill_profiles", dict(preset=preset, selection=sname, kv=row["kv"], point=point),
                    f"{preset} {sname} kv={row['kv']} prefill profile", log,
                    lambda: profile_prefill(model, groups, pprompt, PROFILE_PREFILLS),  # noqa: B023 (called at once)
                    lambda p: f"attention {p['attention_ms']:.3f} ms of {p['kernel_ms']:.2f} ({p['mode']})")


def rounds(opts, rep, preset, model, todo, args, gen, left, log, graphs) -> None:
    """--prefill-rounds: per KV dtype and prefill metric, every selection measured at that metric's point, timed in
    interleaved rounds: the --prompt-len prompt as the B1 runs prefill it, --prefill-lens prompts eager as
    time_prefill does."""
    if not opts.prefill_rounds:
        return
    from kselect.measurement.prefill_rounds import interleaved_prefill  # noqa: PLC0415

    metrics = [("prefill B1 x prompt-len", opts.prompt_len, "decode B1", graphs)]
    # longer prompts eager, unless --prefill-graph-tokens admits them
    metrics += [(f"prefill B1 x {n}", n, f"prefill {n}", graphs if n <= opts.prefill_graph_tokens else False)
                for n in opts.prefill_lens]
    for kv in opts.kv:
        for metric, n, point, g in metrics:
            sels = rep.data["selections"]  # what the table reads at this point: each selection, or its twin
            wanted = {measured_as(sels, preset, x["selection"], kv, point) for x in sels if x["preset"] == preset}
            rows = [(r, gr) for r, gr in todo if (r["selection"], r["kv"], r["point"]) in wanted]
            if len(rows) < 2:
                continue
            if left() < 20 + 2 * len(rows):
                rep.data["skipped"].append(f"{preset} kv={kv} {metric} rounds")
                continue
            prompt = torch.randint(3, args.vocab_size, (n,), generator=gen).tolist()
            what = f"{preset} kv={kv} {metric}: {opts.prefill_rounds} interleaved rounds over {len(rows)} selections"
            try:
                got = interleaved_prefill(model, {i: gr for i, (_, gr) in enumerate(rows)}, prompt, opts.prefill_rounds, g,
                                          prefill_graph_tokens=opts.prefill_graph_tokens)
            except Exception as e:  # noqa: BLE001
                rep.data["errors"].append(f"{what}: {first_line(e)}")
                log(f"{what}: FAILED {first_line(e)}")
                free()
                continue
            for i, (r, _) in enumerate(rows):
                rep.data["prefill_rounds"].append(dict(preset=preset, selection=r["selection"], kv=kv, point=r["point"],
                                                       metric=metric, prompt_len=n, **got[i]))
            log(f"{what}: " + ", ".join(f"{sel_label(r)} {got[i]['prefill_tok_s']:,.0f}" for i, (r, _) in enumerate(rows)))
            free()
            rep.save()


# ---------------------------------------------------------------------------- main
class Options(BaseModel):
    """The harness's options, typed: an experiment's `steps.<name>.options` (kselect bench) or the command line."""

    model_config = ConfigDict(extra="forbid")
    out: Path
    budget_s: float = 540
    presets: list[str] = ["gemma4_e4b", "gemma4_31b"]
    selections: list[Literal[tuple(SELECTIONS)]] = DEFAULT_SELECTIONS  # type: ignore[valid-type]
    kv: list[str] = KV_DTYPES
    batches: list[int] = [1, 16]
    e4b_batch_64: bool = True  # also batch 64 for gemma4_e4b, last, if time permits
    prompt_len: int = 512
    new: int = 128
    hf_new: int = 32  # HF decode tokens (HF decode is slow; per-step time is flat)
    reps: int = 3
    check_batch: int = 2
    check_steps: int = 4
    capacity_gib: float = 40.0
    platform: str = "auto"
    seed: int = 0
    no_hf: bool = False
    no_cuda_graphs: bool = False
    rules: str = SEED.removeprefix("rules=")  # rules for every selection
    no_numerics: bool = False  # skip the per-call numerics check (conformance has it)
    prefill_lens: list[int] = []  # also time B1 prefill of one prompt of each of these lengths, per selection
    chunk_sweep: list[int] = []  # prefill chunk sizes (Engine max_step_tokens) timed for each prefill_lens prompt
    chunk_selections: list[str] = ["vllm", "latency"]
    skip: list[str] = []  # selection:kv pairs not to run (e.g. pin_triton:auto)
    profile_selections: list[str] = []  # profile B1 eager decode steps (attention ms per step) for these selections
    objective_at_run: bool = True  # resolve objective selections at each run's own shapes
    prefill_rounds: int = 0  # time each prefill metric again in this many interleaved rounds (prefill_rounds.py)
    prefill_graph_tokens: int = DEFAULT_MAX_TOKENS  # the longest prefill step that replays a CUDA graph
    smoke: bool = False  # CPU smoke run: gemma4_tiny, tiny sizes

    @field_validator("prefill_graph_tokens")
    @classmethod
    def _bucket(cls, v: int) -> int:
        check_max_tokens(v)
        return v


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m kselect.measurement.e2e`: Options' fields as --options (defaults from Options)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float)
    ap.add_argument("--presets", nargs="+")
    ap.add_argument("--selections", nargs="+", choices=list(SELECTIONS))
    ap.add_argument("--kv", nargs="+")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--e4b-batch-64", action=argparse.BooleanOptionalAction,
                    help="also batch 64 for gemma4_e4b, last, if time permits")
    ap.add_argument("--prompt-len", type=int)
    ap.add_argument("--new", type=int)
    ap.add_argument("--hf-new", type=int, help="HF decode tokens (HF decode is slow; per-step time is flat)")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--check-batch", type=int)
    ap.add_argument("--check-steps", type=int)
    ap.add_argument("--capacity-gib", type=float)
    ap.add_argument("--platform")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--rules", help="rules for every selection (vllm_0_33_0: vLLM 0.33.0, the default rules of kselect)")
    ap.add_argument("--no-numerics", action="store_true", help="skip the per-call numerics check (conformance has it)")
    ap.add_argument("--prefill-lens", type=int, nargs="*",
                    help="also time B1 prefill of one prompt of each of these lengths, per selection")
    ap.add_argument("--chunk-sweep", type=int, nargs="*",
                    help="prefill chunk sizes (Engine max_step_tokens) timed for each --prefill-lens prompt")
    ap.add_argument("--chunk-selections", nargs="*")
    ap.add_argument("--skip", nargs="*", help="selection:kv pairs not to run (e.g. pin_triton:auto)")
    ap.add_argument("--profile-selections", nargs="*",
                    help="profile B1 eager decode steps (attention ms per step) for these selections")
    ap.add_argument("--objective-at-run", action=argparse.BooleanOptionalAction,
                    help="resolve objective selections at each run's own shapes (objective.decode.batch/context, "
                         "objective.prefill.context): one resolution per decode batch and per --prefill-lens prompt")
    ap.add_argument("--prefill-rounds", type=int,
                    help="after the B1 runs, time each prefill metric again in this many rounds that visit every "
                         "selection (kselect/measurement/prefill_rounds.py); the objective table reads those")
    ap.add_argument("--prefill-graph-tokens", type=int,
                    help="the longest prefill step that replays a CUDA graph (a bucket of gemma4/graphs.py); "
                         "--prefill-lens prompts up to it are timed on graphs in the interleaved rounds, longer ones eager")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke run: gemma4_tiny, tiny sizes")
    ap.set_defaults(**{k: f.default for k, f in Options.model_fields.items() if k != "out"})
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    ns = ap.parse_args(argv)
    try:
        check_max_tokens(ns.prefill_graph_tokens)
    except ValueError as e:
        ap.error(f"--prefill-graph-tokens: {e}")
    command = " ".join([sys.executable.rsplit("/", 1)[-1], "-m kselect.measurement.e2e", *argv])
    return run(Options.model_validate(vars(ns)), command)


def run(opts: Options, command: str) -> int:
    """The harness on typed options; `command` is what the report records as the run's command."""
    opts = opts.model_copy(deep=True)
    if opts.smoke:
        opts.presets, opts.batches, opts.e4b_batch_64 = ["gemma4_tiny"], [1, 2], False
        opts.prompt_len, opts.new, opts.hf_new, opts.reps, opts.check_steps = 24, 6, 4, 1, 3
        if opts.platform == "auto":
            opts.platform = "cpu"
    t0 = time.perf_counter()
    left = lambda: opts.budget_s - (time.perf_counter() - t0)  # noqa: E731
    graphs = False if opts.no_cuda_graphs else None
    rep = Report(opts.out, environment([], command=command), opts.model_dump(mode="json"))

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    torch.manual_seed(opts.seed)
    for preset in opts.presets:
        if left() < 30:
            rep.data["skipped"].append(f"{preset} (all)")
            rep.save()
            continue
        base = [f"platform={opts.platform}", f"model={preset}"]
        t = time.perf_counter()
        try:
            cfg0, _ = select(base)
            model, _, source = build_model(cfg0, opts.seed)
        except Exception as e:  # noqa: BLE001
            rep.data["errors"].append(f"{preset}: build failed: {first_line(e)}")
            log(f"{preset}: build failed: {first_line(e)}")
            rep.save()
            continue
        if model.device.type == "cuda":
            torch.cuda.synchronize()
            if not rep.data["ceilings"]:
                rep.data["ceilings"] = ceilings(model.device)
        elif sum(p.numel() for p in model.parameters()) < 5e7:
            torch.set_num_threads(1)
        args, dev = model.args, model.device
        n = sum(p.numel() for p in model.parameters())
        wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        ple = model.embed_tokens_per_layer.weight if args.hidden_size_per_layer_input else None
        read = wbytes - (ple.numel() * ple.element_size() if ple is not None else 0)  # PLE table: a lookup
        info = dict(source=source, params_b=n / 1e9, weight_gb=wbytes / 1e9, decode_read_gb=read / 1e9,
                    build_s=round(time.perf_counter() - t, 2), device=str(dev), dtype=args.dtype,
                    sliding_window=args.sliding_window)
        if rep.data["ceilings"].get("copy_gbs"):
            info["roofline_b1_tok_s"] = rep.data["ceilings"]["copy_gbs"] * 1e9 / read
        if dev.type == "cuda":
            info["gpu_mem_after_build_gib"] = round(torch.cuda.memory_allocated() / 2**30, 1)
        rep.data["presets"][preset] = info
        log(f"{preset}: {n / 1e9:.2f}B params ({wbytes / 1e9:.1f} GB) built in {info['build_s']} s on {dev}")
        rep.save()

        g = torch.Generator().manual_seed(opts.seed + 1)
        batches = list(opts.batches) + ([64] if opts.e4b_batch_64 and preset == "gemma4_e4b" and 64 not in opts.batches else [])
        prompts = torch.randint(3, args.vocab_size, (max(batches), opts.prompt_len), generator=g).tolist()
        check_len = min(args.sliding_window + 64, args.max_position_embeddings - opts.check_steps - 2)
        check_prompts = torch.randint(3, args.vocab_size, (opts.check_batch, check_len), generator=g).tolist()

        # 1. selections: groups, capacity, numerics (each distinct selection once)
        distinct: dict[tuple, dict] = {}
        todo = []
        ref_groups = None
        for sname, kv, point in ((n, k, p) for n in opts.selections for k in opts.kv
                                 for p in run_points(opts, n, batches)):
            if f"{sname}:{kv}" in opts.skip:
                continue
            row = dict(preset=preset, selection=sname, kv=kv, point=point)
            rep.data["selections"].append(row)
            try:
                over = selection_overrides(sname, opts.rules)
                _, sel = select(base + [f"kv_cache={kv}", *over, *point_overrides(opts, point)])
                groups = model_groups(sel)
            except Exception as e:  # noqa: BLE001
                row["error"] = first_line(e)
                log(f"{preset} {sname} kv={kv}: selection failed: {row['error']}")
                rep.save()
                continue
            row.update(groups=describe(groups),
                       capacity=capacity(args, groups, model.dtype, opts.capacity_gib))
            if ref_groups is None and kv == "auto":
                ref_groups = reference_groups(groups)
            sig = signature(groups)
            twin = None if sname == "vllm_twin" else next((r for r in distinct.get(sig, []) if r["point"] in ("", point)), None)
            if twin is not None:  # measured once: a row that runs at every point, or at this one
                row["same_as"] = f"{twin['selection']} kv={twin['kv']}"
                row["same_as_point"] = twin["point"]
                row["numerics"] = twin.get("numerics")
                rep.save()
                continue
            numerics_of = (distinct.get(sig) or [None])[0]  # the same kernels, measured at another point
            distinct.setdefault(sig, []).append(row)
            todo.append((row, groups))
            if numerics_of is not None:
                row["numerics"] = numerics_of.get("numerics")
                continue
            if opts.no_numerics:
                continue
            if left() < 20:
                rep.data["skipped"].append(f"{preset} {sname} kv={kv} numerics")
                rep.save()
                continue
            try:
                row["numerics"] = numerics_check(model, groups, check_prompts, opts.check_steps, graphs)
                nm = row["numerics"]
                log(f"{preset} {sname} kv={kv}: {describe(groups)['sliding_window']['backend']} / "
                    f"{describe(groups)['full_attention']['backend']}: numerics max rel err "
                    f"per call {fnum(nm.get('attention_max_rel_err'), '.2e')}, logits drift {nm['max_rel_err']:.2e} ({nm['verdict']}), capacity {row['capacity']['tokens']:,} tokens")
            except Exception as e:  # noqa: BLE001
                row["numerics"] = dict(error=first_line(e))
                row["error"] = f"numerics: {first_line(e)}"
                log(f"{preset} {sname} kv={kv}: numerics failed: {first_line(e)}")
                free()
            rep.save()

        # 2. HF: share weights, check logits
        hf = None
        if not opts.no_hf and ref_groups is not None and left() > 20:
            try:
                hf = hf_model(model)
                info["hf_check"] = hf_logits_check(model, hf, ref_groups, prompts[:2])
                log(f"{preset}: HF logits check {info['hf_check']['max_rel_err']:.2e} ({info['hf_check']['verdict']})")
            except Exception as e:  # noqa: BLE001
                info["hf_check"] = dict(error=first_line(e))
                log(f"{preset}: HF build/check failed: {first_line(e)}")
                hf = None
            rep.save()

        # 3. throughput, by batch (so every selection gets the small batches before any big one)
        for bi, b in enumerate(batches):
            if bi == 1:  # after B1 of every selection: long prefill, chunk sweep, profiles, interleaved prefills
                extras(opts, rep, preset, model, todo, args, g, left, log)
                rounds(opts, rep, preset, model, todo, args, g, left, log, graphs)
            for row, groups in todo:
                if row["point"] not in ("", f"decode B{b}"):
                    continue
                run = dict(preset=preset, selection=row["selection"], kv=row["kv"], batch=b, point=row["point"],
                           prompt_len=opts.prompt_len, new_tokens=opts.new,
                           backends={k: v["backend"] for k, v in row["groups"].items()})
                if left() < 15:
                    rep.data["skipped"].append(f"{preset} {row['selection']} kv={row['kv']} B{b}")
                    continue
                measure(rep, "runs", run, f"{preset} {row['selection']} kv={row['kv']} B{b}", log,
                        lambda: time_engine(model, groups, prompts[:b], opts.new, opts.reps, graphs),  # noqa: B023
                        lambda r: f"prefill {r['prefill_tok_s']:,.0f} tok/s, decode {r['decode_tok_s']:,.1f} tok/s "
                                  f"({r['decode_ms_per_step']:.2f} ms/step, graphs {'on' if r['cuda_graphs'] else 'off'})")
            if len(batches) == 1:
                extras(opts, rep, preset, model, todo, args, g, left, log)
                rounds(opts, rep, preset, model, todo, args, g, left, log, graphs)
            if hf is not None:
                h = dict(preset=preset, batch=b, prompt_len=opts.prompt_len)
                if left() < 15:
                    rep.data["skipped"].append(f"{preset} HF B{b}")
                    rep.save()
                else:
                    measure(rep, "hf", h, f"{preset} HF sdpa B{b}", log,
                            lambda: time_hf(hf, prompts[:b], opts.hf_new, opts.reps, dev),  # noqa: B023
                            lambda h: f"prefill {h['prefill_tok_s']:,.0f} tok/s, decode {h['decode_tok_s']:,.1f} tok/s")
                    for n in opts.prefill_lens if b == 1 else ():
                        if left() < 15:
                            rep.data["skipped"].append(f"{preset} HF prefill {n}")
                            continue
                        measure(rep, "prefills", dict(preset=preset, selection=HF, kv="auto", prompt_len=n, chunk=None),
                                f"{preset} HF sdpa prefill {n}", log,
                                lambda: time_hf_prefill(hf, n, args.vocab_size, opts.reps, dev, opts.seed + n),  # noqa: B023
                                lambda r: f"{r['prefill_tok_s']:,.0f} tok/s")
        del hf, model
        free()
        log(f"{preset}: done, model freed")
    rep.data["objective_table"] = objective_table(rep.data)
    rep.data["total_s"] = round(time.perf_counter() - t0, 1)
    rep.save()
    log(f"done -> {opts.out}/e2e.json, e2e.md")
    wrong = [f"{r['preset']} {sel_label(r)} kv={r['kv']}" for r in rep.data["selections"]
             if (r.get("numerics") or {}).get("verdict") == WRONG and "same_as" not in r]
    if wrong:  # results are written first; then the run fails, loudly
        print(f"numerics: {WRONG} (an attention call above its bar, or non-finite) for: {', '.join(wrong)}; "
              "exit status 1", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    from kselect.run import script_main as cli

    cli(main)  # every error: exit 2, one paragraph (--debug: traceback)
