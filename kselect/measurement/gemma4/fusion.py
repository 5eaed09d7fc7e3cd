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
The selection is `base` when FlashAttention imports, else `pin_triton` (SELECTIONS).
Results: --out/fusion.json and fusion.md (fusion_report.py), rewritten (atomically) after every measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch

from kselect.measurement.e2e.options import VLLM_KERNELS_ONLY
from kselect.measurement.e2e import ceilings, environment, first_line, hf_model, time_engine, time_hf
from kselect.measurement.gemv_variants import check_modes, split_mode, variant
from kselect.measurement.gemma4.fusion_report import render
from kselect.measurement.step_profile import free, profile_decode
from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error, model_groups

# Selections the fused step can run on: a Triton kernel needs no FlashAttention or FlashInfer build.
SELECTIONS = {"base": [],
              "pin_triton": ["attention.backend=TRITON_ATTN"],  # vLLM's unified_attention on every group
              # per group, the faster Triton kernel on this card's perf data (conf/perf): vLLM's or kselect's own
              # (TRITON_ATTN+kselect), at the run's batch-1 decode point; nothing else is installed for it to pick
              "latency_triton": ["objective=latency", "objective.decode.batch=1", *(
                  f"platform.packages.{p}=false" for p in ("fa2", "fa3", "fa4", "flashinfer", "fa3_upstream"))],
              # per group, the fastest kernel on this card's perf data at the run's batch-16 decode point (run it
              # with --batches 16): among the kernels vLLM ships, and with kselect's builds too
              "latency_vllm_b16": ["objective=latency", "objective.decode.batch=16", *VLLM_KERNELS_ONLY],
              "latency_b16": ["objective=latency", "objective.decode.batch=16"]}


def selection_overrides(name: str, prompt_len: int) -> list[str]:
    """The Hydra overrides of a SELECTIONS entry; an objective's decode context is the run's prompt."""
    over = list(SELECTIONS[name])
    return over + [f"objective.decode.context={prompt_len}"] if "objective=latency" in over else over


def fa_available() -> bool:
    try:
        import flash_attn.cute  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def save(out: Path, data: dict) -> None:
    from kselect.selector.base.files import atomic_write

    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("fusion.json", json.dumps(data, indent=1, default=str)), ("fusion.md", render(data))):
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


def parse(argv: list[str]) -> argparse.Namespace:
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
    ap.add_argument("--selection", default="auto", choices=["auto", *SELECTIONS])
    ap.add_argument("--pdl-max-layer-gb", type=float, default=None,
                    help="the fused forward's PDL rule for this run (gemma4/fused.py PDL_MAX_LAYER_BYTES, in GB): "
                         "a large value launches every one-token step with PDL, 0 none")
    ap.add_argument("--smoke", action="store_true")
    o = ap.parse_args(argv)
    check_modes(ap, o.modes)
    if o.smoke:
        o.presets, o.modes, o.compile_presets, o.fp8_presets = ["gemma4_tiny"], ["unfused"], [], []
        o.batches, o.prompt_len, o.long_prompt, o.new, o.long, o.reps, o.no_hf = [1], 24, 48, 4, 6, 1, True
    return o


def greedy_mode(modes: list[str]) -> str:
    """The fused mode the greedy check compares with the unfused modules: the last fused one measured (a variant
    included), "triton" when none is."""
    return next((m for m in reversed(modes) if split_mode(m)[0] not in ("unfused", "compile")), "triton")


def in_mode(model, mode: str):
    """Set the model's compute mode; the context its steps (and graphs captured) run in: the variant's, if any."""
    compute, name = split_mode(mode)
    model.set_compute(compute)
    return variant(name) if name else contextlib.nullcontext()


class Session:
    """One run: its options, the results so far (saved after every measurement), the clock against the budget."""

    def __init__(self, o: argparse.Namespace, argv: list[str]):
        self.o, self.t0 = o, time.perf_counter()
        self.platform = "cpu" if o.smoke else "auto"
        sel_name = o.selection if o.selection != "auto" else ("base" if o.smoke or fa_available() else "pin_triton")
        self.sel_over = selection_overrides(sel_name, o.prompt_len)
        env = environment(argv, "-m kselect.measurement.gemma4.fusion")
        self.data = dict(environment=env, options={k: str(v) for k, v in vars(o).items()}, selection=sel_name,
                         ceilings={}, presets={}, runs=[], fp8=[], profiles=[], greedy=[], prefill=[], hf=[],
                         errors=[], skipped=[])

    def left(self) -> float:
        return self.o.budget_s - (time.perf_counter() - self.t0)

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def guarded(self, what: str, fn, need: float = 15):
        """fn() if the budget leaves `need` seconds; an error is recorded, not raised; the results saved after."""
        if self.left() < need:
            self.data["skipped"].append(what)
            self.log(f"skipped (budget): {what}")
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            self.data["errors"].append(f"{what}: {first_line(e)}")
            self.log(f"FAILED {what}: {first_line(e)}")
            free()
            return None
        finally:
            save(self.o.out, self.data)

    def build(self, preset: str):
        base = [f"platform={self.platform}", f"model={preset}"]
        cfg, _ = select(base)
        model, _, _ = build_model(cfg, 0)
        from kselect.gemma4 import fused

        fused.prepare(model)  # once, before anything shares the tensors (HF below)
        return model, base

    def groups_for(self, base: list[str], kv: str):
        _, sel = select(base + [f"kv_cache={kv}", *self.sel_over])
        return model_groups(sel)


class Preset:
    """One built preset and what its measurements share: the model, its selection overrides, the prompts."""

    def __init__(self, s: Session, name: str):
        o = s.o
        t = time.perf_counter()
        self.name = name
        self.model, self.base = s.build(name)
        self.args, self.dev = self.model.args, self.model.device
        if self.dev.type == "cuda" and not s.data["ceilings"]:
            s.data["ceilings"] = ceilings(self.dev)
        self._record_sizes(s)
        s.log(f"{name}: built in {time.perf_counter() - t:.1f} s ({s.data['presets'][name]['weight_gb']:.1f} GB)")
        g = torch.Generator().manual_seed(1)
        self.prompts = torch.randint(3, self.args.vocab_size, (max(*o.batches, o.greedy_batch), o.prompt_len),
                                     generator=g).tolist()
        self.groups = s.groups_for(self.base, "auto")

    def _record_sizes(self, s: Session) -> None:
        """Weight bytes, the bytes a decode step reads (not the per-layer-input table) and the B1 roofline."""
        args = self.args
        wbytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        ple = self.model.embed_tokens_per_layer.weight if args.hidden_size_per_layer_input else None
        read = wbytes - (ple.numel() * ple.element_size() if ple is not None else 0)
        info = s.data["presets"].setdefault(self.name, dict(weight_gb=wbytes / 1e9, decode_read_gb=read / 1e9,
                                                            layers=args.num_hidden_layers))
        if s.data["ceilings"].get("copy_gbs"):
            info["roofline_b1_tok_s"] = s.data["ceilings"]["copy_gbs"] * 1e9 / read


def decode_runs(s: Session, p: Preset, modes: list[str]) -> None:
    """1. decode and prefill, by batch (every mode gets the small batch before any big one)."""
    for b in s.o.batches:
        for mode in modes:
            def one(mode=mode, b=b):
                with in_mode(p.model, mode):  # graphs captured inside keep the variant
                    r = time_engine(p.model, p.groups, p.prompts[:b], s.o.new, s.o.reps, None)
                r.update(preset=p.name, mode=mode, kv="auto", batch=b)
                s.data["runs"].append(r)
                s.log(f"{p.name} {mode} B{b}: decode {r['decode_tok_s']:,.1f} tok/s ({r['decode_ms_per_step']:.2f} "
                      f"ms/step, graphs {r['cuda_graphs']}), prefill {r['prefill_tok_s']:,.0f} tok/s, warm-up "
                      f"{r['warmup_s']} s")
            s.guarded(f"{p.name} {mode} B{b}", one, need=60 if mode == "compile" else 15)


def fp8_runs(s: Session, p: Preset) -> None:
    """2. FP8 KV against bf16 KV (fused)."""
    g8 = s.groups_for(p.base, "fp8")
    for b in s.o.batches:
        def fp8_run(b=b):
            p.model.set_compute("triton")
            r = time_engine(p.model, g8, p.prompts[:b], s.o.new, s.o.reps, None)
            r.update(preset=p.name, mode="triton", kv="fp8", batch=b)
            s.data["fp8"].append(r)
            s.log(f"{p.name} triton fp8-KV B{b}: decode {r['decode_tok_s']:,.1f} tok/s")
        s.guarded(f"{p.name} fp8 B{b}", fp8_run)


def profiles(s: Session, p: Preset) -> None:
    """3. a profile of eager batch-1 decode steps per mode (CUDA only)."""
    for mode in s.o.modes:
        def prof(mode=mode):
            with in_mode(p.model, mode):
                r = profile_decode(p.model, p.groups, p.prompts[0], 8, p.args.num_hidden_layers)
            step = [x for x in s.data["runs"] if x["preset"] == p.name and x["mode"] == mode and x["batch"] == 1]
            if step:
                r["graph_step_ms"] = step[0]["decode_ms_per_step"]
                r["idle_ms_per_step"] = r["graph_step_ms"] - r["kernel_ms_per_step"]
            r.update(preset=p.name, mode=mode, batch=1)
            s.data["profiles"].append(r)
            s.log(f"{p.name} {mode} profile: {r['kernels_per_step']:.0f} kernels/step ({r['kernels_per_layer']:.1f} "
                  f"a layer), " + ", ".join(f"{c} {v:.2f}" for c, v in r["ms_per_step"].items()) + " ms")
        s.guarded(f"{p.name} profile {mode}", prof)


def greedy_check(s: Session, p: Preset, kv: str) -> None:
    """4. greedy tokens over --long steps (graphs on), the measured fused mode against the unfused modules."""
    o, gk, nb, fused_mode = s.o, s.groups_for(p.base, kv), s.o.greedy_batch, greedy_mode(s.o.modes)
    logits, runs = {}, {}
    for mode in ("unfused", fused_mode):  # prefill logits of the prompts, eager
        with in_mode(p.model, mode):
            eng = Engine(p.model, gk, EngineConfig(max_seqs=nb, max_seq_len=o.prompt_len + 1, cuda_graphs=False))
            logits[mode] = eng.extend(list(range(nb)), p.prompts[:nb]).float()
            del eng
    lerr = max_rel_error(logits[fused_mode], logits["unfused"])
    for mode in ("unfused", fused_mode):
        with in_mode(p.model, mode):
            runs[mode] = greedy(p.model, gk, p.prompts[:nb], o.long)
    rows = [dict(sequence=i, steps=len(a), first_divergence=first_divergence(a, b), identical=a == b)
            for i, (a, b) in enumerate(zip(runs["unfused"], runs[fused_mode]))]
    s.data["greedy"].append(dict(preset=p.name, mode=fused_mode, kv=kv, batch=nb, steps=o.long, sequences=rows,
                                 prefill_logits_rel_err=lerr, tokens={k: v[0][:32] for k, v in runs.items()}))
    s.log(f"{p.name} {fused_mode} {kv} B{nb} fused vs unfused: prefill logits rel err {lerr:.2e}; greedy {o.long} "
          "steps: " + "; ".join(f"seq {r['sequence']}: " + ("identical" if r["identical"] else
                                                            f"diverges at {r['first_divergence']}") for r in rows))


def prefill_vs_hf(s: Session, p: Preset) -> None:
    """5. prefill of a --prompt-len and a --long-prompt prompt, ours (fused) against HF's, and HF's decode step."""
    o = s.o
    g2 = torch.Generator().manual_seed(2)
    long_prompt = torch.randint(3, p.args.vocab_size, (o.long_prompt,), generator=g2).tolist()
    for n, prompt in ((o.prompt_len, p.prompts[0]), (o.long_prompt, long_prompt)):
        def ours(n=n, prompt=prompt):
            p.model.set_compute("triton" if p.dev.type == "cuda" else split_mode(o.modes[-1])[0])
            r = time_engine(p.model, p.groups, [prompt], 4, 3, False)
            s.data["prefill"].append(dict(preset=p.name, mode=p.model.compute, prompt_len=n,
                                          prefill_tok_s=r["prefill_tok_s"], prefill_ms=r["prefill_ms"]))
            s.log(f"{p.name} prefill {n}: {r['prefill_tok_s']:,.0f} tok/s ({r['prefill_ms']:.1f} ms)")
        s.guarded(f"{p.name} prefill {n}", ours)
    if o.no_hf:
        return
    hf = s.guarded(f"{p.name} HF build", lambda: hf_model(p.model), need=40)
    if hf is None:
        return
    for n, prompt, new in ((o.prompt_len, p.prompts[0], o.hf_new), (o.long_prompt, long_prompt, 3)):
        def hf_run(n=n, prompt=prompt, new=new):
            r = hf_prefill_and_step(hf, prompt, 3, p.dev, new)
            r.update(preset=p.name, prompt_len=n, host=s.data["environment"].get("host"), cpu=_cpu_name())
            s.data["hf"].append(r)
            s.log(f"{p.name} HF prefill {n}: {r['prefill_tok_s']:,.0f} tok/s; decode step "
                  f"{r['decode_ms_per_step']:.1f} ms")
        s.guarded(f"{p.name} HF {n}", hf_run, need=25)


def measure_preset(s: Session, name: str, compile_pass: bool) -> None:
    """Every measurement of one preset (its compile pass: decode and prefill under torch.compile only). The model
    (and HF's) are garbage once this returns."""
    p = Preset(s, name)
    if compile_pass:
        decode_runs(s, p, ["compile"])
    else:
        decode_runs(s, p, s.o.modes)
        if name in s.o.fp8_presets:
            fp8_runs(s, p)
        if p.dev.type == "cuda":
            profiles(s, p)
            for kv in s.o.greedy_kv:
                s.guarded(f"{name} greedy {kv}", lambda kv=kv: greedy_check(s, p, kv), need=30)
        prefill_vs_hf(s, p)


def main(argv: list[str]) -> int:
    o = parse(argv)
    if o.pdl_max_layer_gb is not None:
        from kselect.gemma4 import fused

        fused.PDL_MAX_LAYER_BYTES = o.pdl_max_layer_gb * 1e9
    s = Session(o, argv)
    order = list(o.presets) + [p for p in o.compile_presets if p in o.presets]
    for n_preset, preset in enumerate(order):
        compile_pass = n_preset >= len(o.presets)
        if s.left() < 40:
            s.data["skipped"].append(f"{preset}{' compile' if compile_pass else ''} (all)")
            continue
        measure_preset(s, preset, compile_pass)
        free()
        if not compile_pass:
            s.log(f"{preset}: done")
    s.data["total_s"] = round(time.perf_counter() - s.t0, 1)
    save(o.out, s.data)
    s.log(f"done -> {o.out}/fusion.json, fusion.md")
    print(render(s.data))
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
