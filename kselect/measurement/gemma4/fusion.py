"""The fused decode step against the unfused modules, same run, same weights (issue #16).

    python -m kselect.measurement.gemma4.fusion --out $OUT/fusion --budget-s 540
    python -m kselect.measurement.gemma4.fusion --smoke --out /tmp/fusion      # CPU, gemma4_tiny, unfused only

Per preset (seeded random bf16 weights built on the device, q/k/v and gate/up concatenated once):
  * decode tok/s at batch 1 and 16 (CUDA graphs, --new tokens after a 512-token prompt, median of
    --reps) and prefill tok/s, for each compute mode: `unfused` (the plain modules: the baseline),
    `triton` (gemma4/fused.py with kernels/), and at the end `compile` (the same fused regions through
    torch.compile, inside our graph capture) for --compile-presets;
  * FP8 KV vs bf16 KV decode (--fp8-presets), fused;
  * a profile of eager decode steps (torch.profiler): kernels per step and per layer, device ms by
    category (GEMM, norm, elementwise, attention, copies); idle = the graph step time minus the kernel
    time of one step;
  * greedy tokens over --long steps, fused vs unfused (first divergence, if any), at --greedy-batch sequences
    for each of --greedy-kv;
  * prefill of one 512- and one 4096-token prompt, ours vs HF transformers (sdpa) on the same tensors,
    and HF's decode step time (host-bound: the host is recorded).
The selection is `base` when FlashAttention imports, else `attention.backend=TRITON_ATTN`.
Results: --out/fusion.json and fusion.md, rewritten (atomically) after every measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from kselect.measurement.e2e import ceilings, environment, first_line, hf_model, time_engine, time_hf
from kselect.measurement.gemv_variants import check_modes, split_mode, variant
from kselect.measurement.step_profile import CATEGORIES, free, profile_decode
from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error, model_groups

def fa_available() -> bool:
    try:
        import flash_attn.cute  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def save(out: Path, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("fusion.json", json.dumps(data, indent=1, default=str)), ("fusion.md", render(data))):
        from kselect.selector.base.files import atomic_write

        atomic_write(out / name, text)


def greedy(model, groups, prompts, steps: int) -> list[list[int]]:
    eng = Engine(model, groups, EngineConfig(max_seqs=len(prompts), max_seq_len=len(prompts[0]) + steps + 1))
    res = eng.generate(prompts, steps, stop_at_eos=False)
    out = [list(map(int, r)) for r in (res.tokens if hasattr(res, "tokens") else res.steps)]
    del eng
    free()
    return out


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def hf_prefill_and_step(hf, prompt, reps, dev, new) -> dict:
    r = time_hf(hf, [prompt], new, reps, dev)
    return dict(prefill_tok_s=r["prefill_tok_s"], prefill_ms=r["prefill_ms"],
                decode_ms_per_step=r["decode_ms_per_step"], decode_tok_s=r["decode_tok_s"], new_tokens=new)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--presets", nargs="+", default=["gemma4_e4b", "gemma4_31b"])
    ap.add_argument("--modes", nargs="+", default=["unfused", "triton"],
                    help="compute modes (gemma4/model.py set_compute); triton+<variant>: triton with a GEMV launch "
                         "variant of kselect/measurement/gemv_variants.py")
    ap.add_argument("--compile-presets", nargs="*", default=["gemma4_e4b"])
    ap.add_argument("--fp8-presets", nargs="*", default=["gemma4_31b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--long-prompt", type=int, default=4096)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--long", type=int, default=256, help="greedy steps compared fused vs unfused")
    ap.add_argument("--greedy-batch", type=int, default=2, help="sequences of the greedy check (1: the GEMV paths)")
    ap.add_argument("--greedy-kv", nargs="+", default=["auto"], help="KV dtypes of the greedy check (fp8: quant-query q)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--hf-new", type=int, default=8)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--selection", default="auto", choices=["auto", "base", "pin_triton"])
    ap.add_argument("--pdl-max-layer-gb", type=float, default=None,
                    help="the fused forward's PDL rule for this run (gemma4/fused.py PDL_MAX_LAYER_BYTES, in GB): "
                         "a large value launches every one-token step with PDL, 0 none")
    ap.add_argument("--smoke", action="store_true")
    o = ap.parse_args(argv)
    check_modes(ap, o.modes)
    if o.pdl_max_layer_gb is not None:
        from kselect.gemma4 import fused

        fused.PDL_MAX_LAYER_BYTES = o.pdl_max_layer_gb * 1e9
    if o.smoke:
        o.presets, o.modes, o.compile_presets, o.fp8_presets = ["gemma4_tiny"], ["unfused"], [], []
        o.batches, o.prompt_len, o.long_prompt, o.new, o.long, o.reps, o.no_hf = [1], 24, 48, 4, 6, 1, True
    t0 = time.perf_counter()
    left = lambda: o.budget_s - (time.perf_counter() - t0)  # noqa: E731
    platform = "cpu" if o.smoke else "auto"
    sel_name = o.selection if o.selection != "auto" else ("base" if o.smoke or fa_available() else "pin_triton")
    sel_over = [] if sel_name == "base" else ["attention.backend=TRITON_ATTN"]
    env = environment(argv, "-m kselect.measurement.gemma4.fusion")
    data = dict(environment=env, options={k: str(v) for k, v in vars(o).items()}, selection=sel_name,
                ceilings={}, presets={}, runs=[], fp8=[], profiles=[], greedy=[], prefill=[], hf=[], errors=[],
                skipped=[])

    def log(msg):
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    def guarded(what, fn, need=15):
        if left() < need:
            data["skipped"].append(what)
            log(f"skipped (budget): {what}")
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            data["errors"].append(f"{what}: {first_line(e)}")
            log(f"FAILED {what}: {first_line(e)}")
            free()
            return None
        finally:
            save(o.out, data)

    def build(preset, kv="auto"):
        base = [f"platform={platform}", f"model={preset}"]
        cfg, _ = select(base)
        model, _, _ = build_model(cfg, 0)
        from kselect.gemma4 import fused

        fused.prepare(model)  # once, before anything shares the tensors (HF below)
        return model, base

    def groups_for(base, kv):
        _, sel = select(base + [f"kv_cache={kv}", *sel_over])
        return model_groups(sel)

    order = list(o.presets) + [p for p in o.compile_presets if p in o.presets]
    for n_preset, preset in enumerate(order):
        compile_pass = n_preset >= len(o.presets)
        if left() < 40:
            data["skipped"].append(f"{preset}{' compile' if compile_pass else ''} (all)")
            continue
        t = time.perf_counter()
        model, base = build(preset)
        args, dev = model.args, model.device
        if dev.type == "cuda" and not data["ceilings"]:
            data["ceilings"] = ceilings(dev)
        wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        ple = model.embed_tokens_per_layer.weight if args.hidden_size_per_layer_input else None
        read = wbytes - (ple.numel() * ple.element_size() if ple is not None else 0)
        info = data["presets"].setdefault(preset, dict(weight_gb=wbytes / 1e9, decode_read_gb=read / 1e9,
                                                       layers=args.num_hidden_layers))
        if data["ceilings"].get("copy_gbs"):
            info["roofline_b1_tok_s"] = data["ceilings"]["copy_gbs"] * 1e9 / read
        log(f"{preset}: built in {time.perf_counter() - t:.1f} s ({wbytes / 1e9:.1f} GB)")
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(3, args.vocab_size, (max(*o.batches, o.greedy_batch), o.prompt_len), generator=g).tolist()
        groups = groups_for(base, "auto")
        modes = ["compile"] if compile_pass else o.modes

        # 1. decode and prefill, by batch (every mode gets the small batch before any big one)
        for b in o.batches:
            for mode in modes:
                def one():
                    compute, name = split_mode(mode)
                    model.set_compute(compute)
                    with variant(name) if name else contextlib.nullcontext():  # graphs captured inside keep it
                        r = time_engine(model, groups, prompts[:b], o.new, o.reps, None)
                    r.update(preset=preset, mode=mode, kv="auto", batch=b)
                    data["runs"].append(r)
                    log(f"{preset} {mode} B{b}: decode {r['decode_tok_s']:,.1f} tok/s ({r['decode_ms_per_step']:.2f} "
                        f"ms/step, graphs {r['cuda_graphs']}), prefill {r['prefill_tok_s']:,.0f} tok/s, warm-up "
                        f"{r['warmup_s']} s")
                guarded(f"{preset} {mode} B{b}", one, need=60 if mode == "compile" else 15)
        if compile_pass:
            del model
            free()
            continue

        # 2. FP8 KV vs bf16 KV (fused)
        if preset in o.fp8_presets:
            g8 = groups_for(base, "fp8")
            for b in o.batches:
                def fp8_run():
                    model.set_compute("triton")
                    r = time_engine(model, g8, prompts[:b], o.new, o.reps, None)
                    r.update(preset=preset, mode="triton", kv="fp8", batch=b)
                    data["fp8"].append(r)
                    log(f"{preset} triton fp8-KV B{b}: decode {r['decode_tok_s']:,.1f} tok/s")
                guarded(f"{preset} fp8 B{b}", fp8_run)

        # 3. profiles (CUDA only)
        for mode in (o.modes if dev.type == "cuda" else []):
            def prof():
                compute, name = split_mode(mode)
                model.set_compute(compute)
                with variant(name) if name else contextlib.nullcontext():
                    p = profile_decode(model, groups, prompts[0], 8, args.num_hidden_layers)
                step = [r for r in data["runs"] if r["preset"] == preset and r["mode"] == mode and r["batch"] == 1]
                if step:
                    p["graph_step_ms"] = step[0]["decode_ms_per_step"]
                    p["idle_ms_per_step"] = p["graph_step_ms"] - p["kernel_ms_per_step"]
                p.update(preset=preset, mode=mode, batch=1)
                data["profiles"].append(p)
                log(f"{preset} {mode} profile: {p['kernels_per_step']:.0f} kernels/step ({p['kernels_per_layer']:.1f} "
                    f"a layer), " + ", ".join(f"{c} {v:.2f}" for c, v in p["ms_per_step"].items()) + " ms")
            guarded(f"{preset} profile {mode}", prof)

        # 4. greedy tokens, fused vs unfused, over a long run (graphs on)
        def greedy_check(kv):
            gk, nb = groups_for(base, kv), o.greedy_batch
            logits = {}
            for mode in ("unfused", "triton"):  # prefill logits of the prompts, eager
                model.set_compute(mode)
                eng = Engine(model, gk, EngineConfig(max_seqs=nb, max_seq_len=o.prompt_len + 1, cuda_graphs=False))
                logits[mode] = eng.extend(list(range(nb)), prompts[:nb]).float()
                del eng
            lerr = max_rel_error(logits["triton"], logits["unfused"])
            runs = {}
            for mode in ("unfused", "triton"):
                model.set_compute(mode)
                runs[mode] = greedy(model, gk, prompts[:nb], o.long)
            rows = []
            for i, (a, b_) in enumerate(zip(runs["unfused"], runs["triton"])):
                rows.append(dict(sequence=i, steps=len(a), first_divergence=first_divergence(a, b_),
                                 identical=a == b_))
            data["greedy"].append(dict(preset=preset, kv=kv, batch=nb, steps=o.long, sequences=rows,
                                       prefill_logits_rel_err=lerr, tokens=dict((k, v[0][:32]) for k, v in runs.items())))
            log(f"{preset} {kv} B{nb} fused vs unfused: prefill logits rel err {lerr:.2e}; greedy {o.long} steps: "
                + "; ".join(f"seq {r['sequence']}: {'identical' if r['identical'] else 'diverges at ' + str(r['first_divergence'])}"
                            for r in rows))
        if dev.type == "cuda":
            for kv in o.greedy_kv:
                guarded(f"{preset} greedy {kv}", lambda kv=kv: greedy_check(kv), need=30)

        # 5. prefill 512 / 4096 ours (fused) vs HF, HF's decode step
        g2 = torch.Generator().manual_seed(2)
        long_prompt = torch.randint(3, args.vocab_size, (o.long_prompt,), generator=g2).tolist()
        for n, p in ((o.prompt_len, prompts[0]), (o.long_prompt, long_prompt)):
            def ours():
                model.set_compute("triton" if dev.type == "cuda" else split_mode(o.modes[-1])[0])
                r = time_engine(model, groups, [p], 4, 3, False)
                data["prefill"].append(dict(preset=preset, mode=model.compute, prompt_len=n, prefill_tok_s=r["prefill_tok_s"],
                                            prefill_ms=r["prefill_ms"]))
                log(f"{preset} prefill {n}: {r['prefill_tok_s']:,.0f} tok/s ({r['prefill_ms']:.1f} ms)")
            guarded(f"{preset} prefill {n}", ours)
        if not o.no_hf:
            hf = guarded(f"{preset} HF build", lambda: hf_model(model), need=40)
            if hf is not None:
                for n, p, new in ((o.prompt_len, prompts[0], o.hf_new), (o.long_prompt, long_prompt, 3)):
                    def hf_run():
                        r = hf_prefill_and_step(hf, p, 3, dev, new)
                        r.update(preset=preset, prompt_len=n, host=data["environment"].get("host"),
                                 cpu=_cpu_name())
                        data["hf"].append(r)
                        log(f"{preset} HF prefill {n}: {r['prefill_tok_s']:,.0f} tok/s; decode step "
                            f"{r['decode_ms_per_step']:.1f} ms")
                    guarded(f"{preset} HF {n}", hf_run, need=25)
            del hf
        del model
        free()
        log(f"{preset}: done")
    data["total_s"] = round(time.perf_counter() - t0, 1)
    save(o.out, data)
    log(f"done -> {o.out}/fusion.json, fusion.md")
    print(render(data))
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def render(d: dict) -> str:
    env = d["environment"]
    out = [f"# Fused decode step vs unfused (issue #16), {env.get('gpu') or 'CPU'}", "",
           f"`{env.get('command')}` at commit `{env.get('git_commit')}`{' (dirty)' if env.get('git_dirty') else ''}, "
           f"torch {env.get('torch')}, triton {env.get('triton')}, transformers {env.get('transformers')}, "
           f"{env.get('date')}, host `{env.get('host')}`. Selection: {d.get('selection')}.", ""]
    if d.get("ceilings"):
        out.append(f"Ceilings: copy {d['ceilings'].get('copy_gbs')} GB/s, bf16 GEMM {d['ceilings'].get('bf16_gemm_tflops')} TFLOP/s.")
    for p, i in d["presets"].items():
        out.append(f"- {p}: {i['weight_gb']:.1f} GB weights, {i['decode_read_gb']:.1f} GB read a decode step, B1 roofline "
                   f"{i.get('roofline_b1_tok_s', 0):.0f} tok/s")
    out += ["", "## Decode and prefill (512-token prompts), same run", "",
            "| preset | mode | KV | batch | decode tok/s | ms/step | prefill tok/s | graphs | warm-up s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in d["runs"] + d["fp8"]:
        out.append(f"| {r['preset']} | {r['mode']} | {r['kv']} | {r['batch']} | {r['decode_tok_s']:,.1f} | "
                   f"{r['decode_ms_per_step']:.2f} | {r['prefill_tok_s']:,.0f} | {r['cuda_graphs']} | {r['warmup_s']} |")
    if d["profiles"]:
        out += ["", "## Profile of a batch-1 decode step (eager steps under torch.profiler)", "",
                "| preset | mode | kernels/step | per layer | copies/step | " + " | ".join(f"{c} ms" for c in CATEGORIES)
                + " | kernel ms | graph step ms | idle ms |", "|---" * (8 + len(CATEGORIES)) + "|"]
        for p in d["profiles"]:
            out.append(f"| {p['preset']} | {p['mode']} | {p['kernels_per_step']:.0f} | {p['kernels_per_layer']:.1f} | "
                       f"{p['copies_per_step']:.0f} | " + " | ".join(f"{p['ms_per_step'][c]:.3f}" for c in CATEGORIES)
                       + f" | {p['kernel_ms_per_step']:.3f} | {p.get('graph_step_ms', float('nan')):.3f} | "
                       f"{p.get('idle_ms_per_step', float('nan')):.3f} |")
    if d["greedy"]:
        out += ["", "## Greedy tokens, fused vs unfused (CUDA graphs)", ""]
        for gr in d["greedy"]:
            out.append(f"- {gr['preset']} ({gr.get('kv', 'auto')} KV, batch {gr['batch']}): last-token prefill logits max rel err {gr['prefill_logits_rel_err']:.2e}; "
                       f"greedy over {gr['steps']} steps: " + "; ".join(
                f"sequence {r['sequence']} {'identical' if r['identical'] else 'first differs at step ' + str(r['first_divergence'])}"
                for r in gr["sequences"]))
    if d["prefill"] or d["hf"]:
        out += ["", "## Prefill, batch 1: ours (fused) vs HF transformers sdpa, same tensors", "",
                "| preset | prompt | ours tok/s | HF tok/s | ratio | HF decode step ms (host-bound) | host CPU |",
                "|---|---|---|---|---|---|---|"]
        for r in d["prefill"]:
            h = next((x for x in d["hf"] if x["preset"] == r["preset"] and x["prompt_len"] == r["prompt_len"]), None)
            out.append(f"| {r['preset']} | {r['prompt_len']} | {r['prefill_tok_s']:,.0f} | "
                       + (f"{h['prefill_tok_s']:,.0f} | {r['prefill_tok_s'] / h['prefill_tok_s']:.2f}x | "
                          f"{h['decode_ms_per_step']:.1f} | {h.get('cpu', '')} |" if h else " |  |  |  |"))
    for k in ("errors", "skipped"):
        if d.get(k):
            out += ["", f"**{k}**: " + "; ".join(d[k])]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
