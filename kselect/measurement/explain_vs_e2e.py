"""Does `kselect explain` (conf/perf figures) match what the engine measured in the same run? (#17)

    python3 -m kselect.measurement.explain_vs_e2e --e2e OUT/e2e.json --model gemma4_31b --out OUT/explain_31b.md [--platform auto]

Runs the explain view at the e2e run's operating point (B1 decode over --prompt-len cached tokens,
B1 prefill of --prompt-len and of each --prefill-lens prompt) and sets its figures beside the run's:
  * attention ms per decode step: explain's step total (layers x ms, per group) of vLLM's choice
    and of the fastest verified choice vs the profiled attention kernels of a B1 decode step of the
    `vllm` and `latency` selections (e2e.py --profile-selections), bf16 and FP8;
  * "is FP8 faster than bf16": explain's attention ratio vs the profiled ratio, and vs the whole
    decode step (e2e decode ms/step, bf16 - fp8: the attention difference is all that changes);
  * attention ms per B1 prefill of --prompt-len tokens: explain's prefill step total vs the profiled
    attention kernels of that prefill (e2e.py's prefill_profiles, from the engine's prefill graph);
  * the run's attention kernels by name, decode step and prefill, where e2e.py recorded them.
A row whose explain choice is not the kernel the run used says so instead of comparing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kselect.selector.api import bundled_evidence, compose
from kselect.selector.measure.explain import explain, step, to_text
from kselect.selector.base.files import atomic_write

KV = (("auto", 0), ("fp8", 1))  # e2e kv name, position in explain's caches (model dtype first)


def _pct(a, b):
    return f"{(a / b - 1) * 100:+.1f}%" if a and b else "n/a"


def compare(e2e: dict, model: str, platform: str) -> tuple[str, list[dict]]:
    prompt = e2e["options"]["prompt_len"]
    ctx = prompt + e2e["options"]["new"] // 2
    cfg = compose([f"platform={platform}", f"model={model}", "objective=latency", "objective.decode.batch=1",
                   f"objective.decode.context={ctx}", f"objective.prefill.context={prompt}",
                   f"objective.new_tokens={e2e['options']['new']}"])  # e2e.py's request at its decode B1 point
    ex = explain(cfg, bundled_evidence())
    caches = list(ex["caches"].values())
    run = _B1Decode(e2e, model)
    rows = _decode_rows(run, caches)
    lines = _decode_lines(e2e, model, ex, ctx, rows)
    prows, ptext = prefill_rows(e2e, model, caches, prompt)
    lines += ptext + kernel_lines(e2e, model) + _fp8_lines(run, rows)
    return "\n".join(lines) + "\n", rows + prows


def _b1(model: str):
    """A record of the model's B1 decode point: resolved once ("") or, with e2e.py --objective-at-run, at "decode B1"."""
    return lambda r: r["preset"] == model and r.get("point", "") in ("", "decode B1")


class _B1Decode:
    """The run's B1 decode records of one model: its runs, decode profiles and groups per (selection, kv)."""

    def __init__(self, e2e: dict, model: str):
        b1 = _b1(model)
        self.runs = [r for r in e2e["runs"] if b1(r)]
        self.profiles = {(p["selection"], p["kv"]): p for p in e2e.get("profiles", []) if b1(p) and not p.get("error")}
        self.groups = {(s["selection"], s["kv"]): s.get("groups", {}) for s in e2e["selections"] if b1(s)}
        self.alias = {(s["selection"], s["kv"]): tuple(s["same_as"].rsplit(" kv=", 1)) for s in e2e["selections"]
                      if b1(s) and s.get("same_as")}

    def measured(self, sel: str, kv: str) -> tuple:
        """Selections that resolved to the same groups were measured once: e2e.py's same_as link, followed."""
        return self.alias.get((sel, kv), (sel, kv))


def _decode_rows(run: _B1Decode, caches: list[dict]) -> list[dict]:
    """Explain's decode step of vLLM's choice and of the fastest verified one beside the run's profiled step."""
    rows = []
    for kv, i in KV:
        c = caches[i]
        for sel, key in (("vllm", "vllm"), ("latency", "best")):
            want = {r["group"]: r[key]["backend"] for r in c["rows"] if r["phase"] == "decode"}
            ran = {k: g["backend"] for k, g in run.groups.get((sel, kv), {}).items()}
            p = run.profiles.get(run.measured(sel, kv))
            pred = step(c["rows"], "decode", key)
            # profiled: the attention kernels of the CUDA-graph decode step the run timed (e2e.py mode "graph",
            # quant-query included, as a conf/perf bucket times the whole call); beside it the eager step's
            # forward calls (profiler ranges)
            # and the same kernels with the launch gap before each (kselect/measurement/profiling.py timeline_ms): a bucket's
            # graph wall time per call counts those gaps, the kernels' durations alone do not
            row = dict(kv=kv, selection=sel, explain_backends=want, run_backends=ran, explain_ms=pred,
                       kernels_ms=p["attention_ms_per_step"] if p else None,
                       timeline_ms=p.get("attention_timeline_ms_per_step") if p else None,
                       profile_mode=p.get("mode", "eager") if p else None,
                       eager_call_ms=p.get("attention_call_ms_per_step") if p else None,
                       profile_context=p.get("context") if p else None)
            row["profiled_ms"] = row["timeline_ms"] or row["kernels_ms"]  # like for like where recorded
            row["same_kernels"] = bool(ran) and want == ran
            if row["same_kernels"] and pred and row["profiled_ms"]:
                row["diff"] = pred / row["profiled_ms"] - 1
                row["diff_kernels"] = pred / row["kernels_ms"] - 1
            rows.append(row)
    return rows


def _decode_lines(e2e: dict, model: str, ex: dict, ctx: int, rows: list[dict]) -> list[str]:
    """The report's head (explain's own view at the run's point) and the decode step table."""
    lines = [f"# `kselect explain` vs the same run: {model} on {ex['gpu']}", "",
             f"Explain at B1 decode over {ctx} cached tokens (nearest measured bucket), prefill of "
             f"{e2e['options']['prompt_len']}; the run: e2e.py at commit {e2e['environment'].get('git_commit', '')[:12]}.",
             "", to_text(ex, markdown=True), "",
             "## Attention ms per B1 decode step: explain (layers x conf/perf ms) vs profiled kernels", "",
             "Profiled: the attention kernels (quant-query included) of the decode step as the run timed it (CUDA-graph "
             "replays, or eager where noted): their durations, and their durations plus the launch gap before each "
             "(what a conf/perf bucket's graph wall time per call counts: the like-for-like figure); beside them every "
             "kernel of the eager step's attention forward calls.", "",
             f"Profiled contexts (tokens, the profiled steps' mean where recorded so; before this field e2e.py "
             f"recorded the prompt length and profiled 8 steps after it): "
             f"{sorted({r['profile_context'] for r in rows if r['profile_context']})}; explain's point: {ctx}. A B1 "
             "decode kernel's time moves with the exact context, so the two must agree.", "",
             "| kv | selection | explain's kernels | kernels that ran | explain ms | profiled kernels ms (mode) | "
             "kernels + launch gaps ms | eager forward calls ms | explain vs kernels + gaps | explain vs kernels only |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = (f"{r['diff'] * 100:+.1f}% | {r['diff_kernels'] * 100:+.1f}%" if "diff" in r else
                   "other kernels (explain's choice at this point differs from the run's) | " if not r["same_kernels"]
                   else "no profile | ")
        lines.append(f"| {r['kv']} | {r['selection']} | {_backends(r['explain_backends'])} | "
                     f"{_backends(r['run_backends'])} | {_ms(r['explain_ms'])} | {_ms(r['kernels_ms'])} "
                     f"({r['profile_mode']}) | {_ms(r['timeline_ms'])} | {_ms(r['eager_call_ms'])} | {verdict} |")
    return lines


def _backends(groups: dict) -> str:
    return ", ".join(f"{k.split('_')[0]}: {v}" for k, v in groups.items())


def _ms(x: float | None):
    return "n/a" if x is None else round(x, 3)


def _fp8_lines(run: _B1Decode, rows: list[dict]) -> list[str]:
    """FP8 vs bf16, per selection: explain's attention ratio, the profiled one, and the whole step."""
    lines = ["", "## Is FP8 faster than bf16 here? explain vs measured (same run)", "",
             "| selection | explain attention bf16 / fp8 | profiled attention bf16 / fp8 | e2e B1 decode ms/step bf16 / fp8 | "
             "step difference explained by attention |", "|---|---|---|---|---|"]
    for sel in ("vllm", "latency"):
        a, b = (next((r for r in rows if r["kv"] == kv and r["selection"] == sel), None) for kv, _ in KV)
        step_ms = {kv: next((r.get("decode_ms_per_step") for r in run.runs
                             if (r["selection"], r["kv"], r["batch"]) == (*run.measured(sel, kv), 1)), None) for kv, _ in KV}
        ea, eb, pa, pb = a["explain_ms"], b["explain_ms"], a["profiled_ms"], b["profiled_ms"]
        sa, sb = step_ms["auto"], step_ms["fp8"]
        share = (f"{(sa - sb):+.3f} ms measured vs {(pa - pb):+.3f} ms profiled attention"
                 if sa and sb and pa and pb else "n/a")
        lines.append(f"| {sel} | {ea and eb and f'{ea:.3f} / {eb:.3f} ({ea / eb:.2f}x)'} | "
                     f"{pa and pb and f'{pa:.3f} / {pb:.3f} ({pa / pb:.2f}x)'} | "
                     f"{sa and sb and f'{sa:.2f} / {sb:.2f} ({sa / sb:.3f}x)'} | {share} |")
    return lines


def prefill_rows(e2e: dict, model: str, caches: list[dict], prompt: int) -> tuple[list[dict], list[str]]:
    """Explain's prefill step (layers x conf/perf ms at prefill B1 x prompt) of vLLM's choice and of the
    fastest verified choice vs the profiled attention of the B1 run's prefill, for the selections e2e.py
    profiled; rows whose prefill kernels differ from the run's say so instead of comparing."""
    b1 = _b1(model)
    prof = {(p["selection"], p["kv"]): p for p in e2e.get("prefill_profiles", []) if b1(p) and not p.get("error")}
    if not prof:
        return [], []
    groups = {(s["selection"], s["kv"]): s.get("groups", {}) for s in e2e["selections"] if b1(s)}
    rows, lines = [], ["", f"## Attention ms per B1 prefill of {prompt} tokens: explain (layers x conf/perf ms) vs profiled kernels",
                       "", "| kv | selection | explain's kernels | kernels that ran | explain ms | profiled kernels ms (mode) | "
                       "kernels + launch gaps ms | explain vs kernels + gaps |", "|---|---|---|---|---|---|---|---|"]
    for kv, i in KV:
        c = caches[i]
        for sel, key in (("vllm", "vllm"), ("latency", "best")):
            p = prof.get((sel, kv))
            if p is None:
                continue
            want = {r["group"]: r[key]["backend"] for r in c["rows"] if r["phase"] == "prefill"}
            ran = {k: g.get("prefill_backend", g["backend"]) for k, g in groups.get((sel, kv), {}).items()}
            pred = step(c["rows"], "prefill", key, "kernel_ms")  # the profile holds kernels, not host plans
            got = p.get("attention_timeline_ms") or p.get("attention_ms")
            row = dict(phase="prefill", kv=kv, selection=sel, explain_backends=want, run_backends=ran, explain_ms=pred,
                       kernels_ms=p.get("attention_ms"), timeline_ms=p.get("attention_timeline_ms"),
                       profile_mode=p.get("mode"), prompt_len=p.get("prompt_len"), same_kernels=bool(ran) and want == ran)
            if row["same_kernels"] and pred and got:
                row["diff"] = pred / got - 1
            rows.append(row)
            verdict = (f"{row['diff'] * 100:+.1f}%" if "diff" in row else
                       "other kernels" if not row["same_kernels"] else "no profile")
            lines.append(f"| {kv} | {sel} | {_backends(want)} | {_backends(ran)} | {_ms(pred)} | {_ms(row['kernels_ms'])} "
                         f"({row['profile_mode']}) | {_ms(row['timeline_ms'])} | {verdict} |")
    return rows, lines


def kernel_lines(e2e: dict, model: str) -> list[str]:
    """The run's attention kernels by name (e2e.py profiles' attention_kernels, where recorded): where a row
    above parts from explain, which kernel holds the time."""
    b1 = _b1(model)
    profs = [("decode step", p) for p in e2e.get("profiles", []) if b1(p)] + \
            [(f"prefill of {p.get('prompt_len')}", p) for p in e2e.get("prefill_profiles", []) if b1(p)]
    profs = [(what, p) for what, p in profs if p.get("attention_kernels")]
    if not profs:
        return []
    lines = ["", "## Attention kernels that ran (per decode step, or per prefill)", "",
             "| phase | kv | selection | kernel | launches | mean us | us |", "|---|---|---|---|---:|---:|---:|"]
    for what, p in profs:
        for name, k in p["attention_kernels"].items():
            lines.append(f"| {what} | {p['kv']} | {p['selection']} | `{name}` | {k['launches']:g} | {k['mean_us']:.2f} | "
                         f"{k['launches'] * k['mean_us']:.1f} |")
    return lines


class Options(BaseModel):
    """The comparison's options, typed: an experiment's `steps.<name>.options` (kselect bench) or the command line."""

    model_config = ConfigDict(extra="forbid")
    e2e: Path  # an e2e.json (kselect/measurement/e2e/)
    model: str
    platform: str = "auto"
    out: Path  # <out> (markdown) and <out>.json (the rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--e2e", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--platform", default=Options.model_fields["platform"].default)
    ap.add_argument("--out", type=Path, required=True)
    return run(Options.model_validate(vars(ap.parse_args(argv))), "")


def run(opts: Options, command: str) -> int:
    """The comparison on typed options (it records no command)."""
    text, rows = compare(json.loads(opts.e2e.read_text()), opts.model, opts.platform)
    atomic_write(opts.out, text)
    atomic_write(opts.out.with_suffix(".json"), json.dumps(rows, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
