"""kselect/measurement/e2e/'s results: the record (e2e.json) and its Markdown (e2e.md), above all the objective table, which
compares each objective's selection with vLLM's choice and the best single-backend pin in the same run."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from kselect.measurement.paired import compare, fmt
from kselect.selector.base.files import atomic_write

# selections compared against "vllm" and the pins (objective_table); *_vllm: over the kernels vLLM ships only
OBJECTIVES = ("latency", "throughput", "latency_vllm", "throughput_vllm")
TWIN = "vllm_twin"  # vLLM's selection measured twice in one run: the spread of identical kernels
WRONG = "WRONG"
HF = "HF transformers sdpa"  # the baseline's name in the prefill table


# ---------------------------------------------------------------------------- report
class Report:
    def __init__(self, out: Path, env: dict, opts: dict):
        self.out = out
        self.data = dict(environment=env, options=opts, ceilings={}, presets={}, selections=[], runs=[], hf=[],
                         prefills=[], profiles=[], prefill_profiles=[], prefill_rounds=[], skipped=[], errors=[])
        out.mkdir(parents=True, exist_ok=True)

    def save(self):
        atomic_write((self.out / "e2e.json"), json.dumps(self.data, indent=1, default=str))
        atomic_write((self.out / "e2e.md"), render_md(self.data))


REQUEST = "request B1 (prefill + decode)"  # what objective=latency minimizes at its decode point


def request_tok_s(run: dict) -> float | None:
    """A B1 run's whole request, prompt and decoded tokens over prefill plus decode time: the trade the
    objective makes at its decode point (a slower prefill for faster decode steps, or the reverse)."""
    need = ("prefill_tok_s", "prefill_ms", "decode_ms_per_step", "decode_steps")
    if any(run.get(k) is None for k in need):
        return None
    prompt = run["prefill_tok_s"] * run["prefill_ms"] / 1e3
    ms = run["prefill_ms"] + run["decode_ms_per_step"] * run["decode_steps"]
    return (prompt + run["decode_steps"]) / ms * 1e3


def measured_as(selections: list[dict], preset: str, sel: str, kv: str, point: str = "") -> tuple | None:
    """(selection, kv, point) whose measurements a selection's row at `point` reads (its own row there, else its row
    resolved once; a row resolved to the same groups as another points at that one, `same_as`), or None."""
    rows = {(s["preset"], s["selection"], s["kv"], s.get("point", "")): s for s in selections}
    s = rows.get((preset, sel, kv, point)) or rows.get((preset, sel, kv, ""))
    if s is None or s.get("error"):
        return None
    if s.get("same_as"):
        sel2, kv2 = s["same_as"].rsplit(" kv=", 1)
        return sel2, kv2, s.get("same_as_point", "")
    return sel, kv, s.get("point", "")


def prefill_kernels(selections: list[dict], preset: str, key: tuple) -> tuple | None:
    """What a selection's prefill runs per group: the prefill backend (the decode backend when it has none), kernel and
    KV blocks, and the KV dtype; None when the row is not there."""
    rows = [s for s in selections if (s["preset"], s["selection"], s["kv"], s.get("point", "")) == (preset, *key)]
    if not rows or not rows[0].get("groups"):
        return None
    return tuple(sorted((name, g.get("prefill_backend") or g["backend"], g["kernel_block"], g["kv_block"], g["kv_dtype"])
                        for name, g in rows[0]["groups"].items()))


def declared_band() -> dict[str, float]:
    """The noise band the objective's data declares per phase (conf/objective/latency.yaml `noise_band`)."""
    from kselect.selector.api import CONF_DIR  # noqa: PLC0415
    from kselect.selector.base.files import load_yaml  # noqa: PLC0415

    return dict(load_yaml(CONF_DIR / "objective" / "latency.yaml", "an objective")["noise_band"])


def band_of(metric: str, bands: dict[str, float]) -> float:
    """A metric's band: prefill metrics the prefill band; decode metrics and the request (one prefill and its decode
    steps, which dominate its time) the decode band."""
    return bands["decode"] if metric.startswith("decode") or metric == REQUEST else bands["prefill"]


def objective_table(d: dict, noise: float | None = None) -> list[dict]:
    """Per preset, kv and metric: each objective's tok/s against objective=vllm and the fastest
    single-backend pin (selections named pin_*), measured in this run. Selections resolved to the
    same groups were measured once (same_as): the table follows that link and says so. An objective
    resolved at each run's point (--objective-at-run) is read at the metric's own point. A metric timed in
    interleaved rounds (--prefill-rounds) is judged round by round (kselect/measurement/paired.py): faster or slower
    only where the interval of the per-round ratios excludes 1; block-timed metrics use the metric's noise band
    (`noise`, else the declared band per phase, conf/objective: the spread of two selections on identical kernels
    in one run): a cell within it is a tie, and a tie meets the goal "never slower beyond the band". Where the run
    measured vLLM's selection twice (vllm_twin), that spread is recorded beside each cell (`twin_spread`)."""
    bands, metrics, out = declared_band(), _metrics(d), []
    for preset, kv in dict.fromkeys((s["preset"], s["kv"]) for s in d["selections"]):
        refs = _refs(d["selections"], preset, kv)
        if refs is None:
            continue
        measured = _Measured(d, preset)
        for obj in OBJECTIVES:
            for m in metrics:
                key = measured_as(d["selections"], preset, obj, kv, _point_of(m))
                band = noise if noise is not None else band_of(m, bands)
                t = _cell(measured, refs, dict(preset=preset, kv=kv, metric=m, objective=obj), key, band) if key else None
                if t is not None:
                    out.append(t)
    return out


def _metrics(d: dict) -> list[str]:
    """The objective table's metrics: decode per batch, B1 prefill of the prompt, the B1 request, each prompt length."""
    return ([f"decode B{b}" for b in sorted({r["batch"] for r in d["runs"]})] + ["prefill B1 x prompt-len", REQUEST]
            + [f"prefill B1 x {n}" for n in sorted({r["prompt_len"] for r in d.get("prefills", []) if not r.get("chunk")})])


def _point_of(metric: str) -> str:
    """The operating point an objective resolved at each run's point is read at for a metric."""
    if metric.startswith("decode"):
        return metric
    return "decode B1" if metric in ("prefill B1 x prompt-len", REQUEST) else f"prefill {metric.split()[-1]}"


@dataclass(frozen=True)
class _Refs:
    """What an objective's cells are compared with, for one preset and kv: the keys (measured_as) of vLLM's
    selection, of its twin and of each single-backend pin."""

    base: tuple
    twin: tuple | None
    pins: dict  # pin name -> its key (None: not measured)


def _refs(selections: list[dict], preset: str, kv: str) -> _Refs | None:
    base = measured_as(selections, preset, "vllm", kv)
    if base is None:
        return None
    pins = {s["selection"]: measured_as(selections, preset, s["selection"], kv) for s in selections
            if s["preset"] == preset and s["kv"] == kv and s["selection"].startswith("pin_")}
    return _Refs(base, measured_as(selections, preset, TWIN, kv), pins)


class _Measured:
    """One preset's measurements in a record, read per key (selection, kv, point) and metric."""

    def __init__(self, d: dict, preset: str):
        self.d, self.preset = d, preset

    def rounds(self, kv: str, metric: str) -> list[dict]:
        """The --prefill-rounds records of one metric."""
        return [x for x in self.d.get("prefill_rounds", []) if (x["preset"], x["kv"], x["metric"]) == (self.preset, kv, metric)]

    def _is(self, key: tuple):
        sel, kv, point = key
        return lambda x: (x["preset"], x["selection"], x["kv"], x.get("point", "")) == (self.preset, sel, kv, point)

    def round_ms(self, key: tuple, metric: str) -> list[float] | None:
        """The per-round prefill times of an interleaved metric, in round order."""
        r = [x for x in self.rounds(key[1], metric) if self._is(key)(x)]
        return r[0].get("prefill_ms_reps") if r else None

    def value(self, key: tuple, metric: str) -> float | None:
        """A key's tok/s for a metric: from the interleaved rounds where the metric has them (never mixed with block
        timings), else from its own block's run or prefill."""
        is_row = self._is(key)
        rounds = self.rounds(key[1], metric)
        if rounds:
            r = [x for x in rounds if is_row(x)]
            return r[0].get("prefill_tok_s") if r else None
        if metric.startswith("decode"):
            b = int(metric.split("B")[1])
            r = [x for x in self.d["runs"] if is_row(x) and x["batch"] == b]
            return r[0].get("decode_tok_s") if r else None
        if metric in ("prefill B1 x prompt-len", REQUEST):  # the B1 run: its prefill, or its whole request
            r = [x for x in self.d["runs"] if is_row(x) and x["batch"] == 1]
            if not r:
                return None
            return request_tok_s(r[0]) if metric == REQUEST else r[0].get("prefill_tok_s")
        n = int(metric.split()[-1])
        r = [x for x in self.d.get("prefills", []) if is_row(x) and (x["prompt_len"], x.get("chunk")) == (n, None)]
        return r[0].get("prefill_tok_s") if r else None

    def paired(self, a: tuple, b: tuple, metric: str) -> dict | None:
        """a against b round by round, or None (not interleaved, or rounds missing)."""
        am, bm = self.round_ms(a, metric), self.round_ms(b, metric)
        return compare(am, bm) if am and bm and len(am) == len(bm) else None


def _cell(measured: _Measured, refs: _Refs, head: dict, key: tuple, band: float) -> dict | None:
    """One objective's row for one metric (head: preset, kv, metric, objective), or None where it or vLLM's
    selection has no value."""
    m = head["metric"]
    v, vb = measured.value(key, m), measured.value(refs.base, m)
    if v is None or vb is None:
        return None
    pv = {n: measured.value(k, m) for n, k in refs.pins.items() if k is not None}
    pv = {n: x for n, x in pv.items() if x is not None}
    best = max(pv, key=pv.get) if pv else None
    rs = measured.rounds(head["kv"], m)
    g = sum(1 for x in rs if x.get("prefill_graph_steps"))  # rounds whose prefills replayed graphs
    t = dict(head, point=key[2], value=v, vllm=vb, vs_vllm=v / vb, best_pin=best, best_pin_value=pv.get(best),
             vs_best_pin=v / pv[best] if best else None, interleaved=bool(rs),
             graphs="" if not g else "graphs" if g == len(rs) else f"graphs in {g} of {len(rs)} selections")
    t["noise_band"] = band
    vt = measured.value(refs.twin, m) if refs.twin is not None else None
    if vt:
        t["twin_spread"] = abs(vt / vb - 1)
    pc = measured.paired(key, refs.base, m)
    pp = measured.paired(key, refs.pins[best], m) if best else None
    if pc:
        t["paired_vllm"] = pc
    if pp:
        t["paired_best_pin"] = pp
    t["verdict"] = _verdict(measured, refs, key, t)
    t["goal"] = "missed" if t["verdict"].startswith("SLOWER") else "met"  # a tie's goal: never slower beyond the band
    return t


def _verdict(measured: _Measured, refs: _Refs, key: tuple, t: dict) -> str:
    """Faster, within noise or slower than vLLM's selection and than the best pin; no gain claimed where the objective
    runs vLLM's kernels (all of them, or its prefill kernels for a prefill metric)."""
    selections = measured.d["selections"]
    pk = prefill_kernels(selections, measured.preset, key) if t["metric"].startswith("prefill") else None
    if key == refs.base:
        return "same kernels as vllm (no gain claimed)"
    if pk is not None and pk == prefill_kernels(selections, measured.preset, refs.base):
        return "same prefill kernels as vllm (no gain claimed)"  # per-phase: decodes on other kernels, prefills on vLLM's
    v, vb, band, best = t["value"], t["vllm"], t["noise_band"], t["best_pin"]
    pc, pp = t.get("paired_vllm"), t.get("paired_best_pin")
    if pc:
        faster = {"faster": "faster than vllm", "slower": "SLOWER than vllm", "equal": "within noise of vllm"}[pc["side"]]
    else:
        faster = "faster than vllm" if v > vb * (1 + band) else "within noise of vllm" \
            if v >= vb * (1 - band) else "SLOWER than vllm"
    slower_than_pin = pp["side"] == "slower" if pp else best and v < t["best_pin_value"] * (1 - band)
    pin = "" if not best else f"; SLOWER than {best}" if slower_than_pin else f"; >= best pin ({best})"
    return faster + pin


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.1%}"


def _mode(t: dict) -> str:
    """How an objective-table metric was timed: interleaved rounds, and whether their prefills replayed graphs."""
    if not t.get("interleaved"):
        return ""
    return f" (interleaved, {t['graphs']})" if t.get("graphs") else " (interleaved)"


def _ratio(t: dict, plain: str, paired_key: str) -> str:
    """The round-by-round ratio and its interval where the metric was interleaved, else the plain ratio."""
    return fmt(t[paired_key]) if t.get(paired_key) else fnum(t.get(plain), ".3f")


def sel_label(r: dict) -> str:
    """A selection's name, with the operating point it was resolved at (objectives at each run's point)."""
    return r["selection"] + (f" @ {r['point']}" if r.get("point") else "")


def fnum(x, fmt=",.0f"):
    return "" if x is None else (f"{x:{fmt}}" if isinstance(x, (int, float)) and math.isfinite(x) else str(x))


SLOW_ROUND = 1.05  # a round this much over its selection's median counts as slow


def round_spread(ms: list[float]) -> dict | None:
    """One selection's interleaved prefill rounds (ms): median, min, 95th percentile, max and the slow rounds."""
    if len(ms) < 2:
        return None
    med = statistics.median(ms)
    return dict(rounds=len(ms), median=med, min=min(ms), max=max(ms),
                p95=statistics.quantiles(ms, n=20, method="inclusive")[-1],
                slow=sum(1 for x in ms if x >= SLOW_ROUND * med))


def render_md(d: dict) -> str:
    """The record as Markdown: how it was run, then a section per kind of measurement it holds."""
    sections = (_header, _selections_md, _throughput_md, _prefill_md, _decode_profile_md, _prefill_profile_md,
                _rounds_md, _objectives_md)
    L = [line for section in sections for line in section(d)]
    if d["skipped"]:
        L += ["", "Skipped (time budget): " + ", ".join(d["skipped"])]
    if d["errors"]:
        L += ["", "Errors: " + "; ".join(d["errors"])]
    return "\n".join(L) + "\n"


def _header(d: dict) -> list[str]:
    """The command, commit and versions, the run's sizes, the machine's ceilings and each preset's size."""
    env, o = d["environment"], d["options"]
    L = [f"# Gemma-4 end to end: kselect engine vs HF transformers ({env.get('gpu') or 'CPU'})", "",
         f"`{env['command']}` at commit `{env['git_commit'][:12]}`{' (dirty)' if env.get('git_dirty') else ''}, "
         f"torch {env['torch']}, transformers {env.get('transformers')}, triton {env.get('triton')}, {env['date']}.",
         f"Prompt {o['prompt_len']} random tokens, {o['new']} new tokens greedy (HF: {o['hf_new']}), median of "
         f"{o['reps']} after a warm-up; decode tok/s = batch x decode steps / decode time (prefill excluded).", ""]
    if env.get("host_threads"):
        L += [f"Intra-op CPU threads: the engines {env['host_threads']} (gemma4/host_threads.py), HF "
              f"{env.get('hf_threads', 'not recorded')}.", ""]
    if d.get("ceilings"):
        c = d["ceilings"]
        L += [f"Ceilings: copy {fnum(c.get('copy_gbs'))} GB/s (read+write), bf16 GEMM {fnum(c.get('bf16_gemm_tflops'))} "
              "TFLOP/s.", ""]
    for name, p in d["presets"].items():
        L.append(f"- **{name}**: {p.get('params_b', 0):.2f} B parameters, {p.get('weight_gb', 0):.1f} GB weights "
                 f"({p.get('decode_read_gb', 0):.1f} GB read per decode step), built in {p.get('build_s', 0):.1f} s"
                 + (f"; B1 decode roofline {p['roofline_b1_tok_s']:,.0f} tok/s" if p.get("roofline_b1_tok_s") else ""))
    return L


def _selections_md(d: dict) -> list[str]:
    """A row per selection: its backends, numerics and KV capacity."""
    L = ["", "## Selections: backends, numerics, KV capacity", "",
         "| preset | selection | kv | sliding | full | per-call attention max rel err (bar) | logits drift (prefill / decode) | verdict | "
         f"FP8 quant err | tokens in {d['options']['capacity_gib']:g} GiB | one sequence, windowed sliding cache | bytes/token | "
         "note |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in d["selections"]:
        g = s.get("groups", {})
        be = lambda k: (f"{g[k]['backend']} blk {g[k]['kernel_block']}/{g[k]['kv_block']}"  # noqa: E731
                        + (f" (prefill {g[k]['prefill_backend']})" if g[k].get("prefill_backend") else "") if k in g else "")
        n = s.get("numerics") or {}
        num = (f"{fnum(n.get('max_rel_err'), '.2e')} ({fnum(n.get('prefill_rel_err'), '.1e')} / "
               f"{fnum(n.get('decode_rel_err'), '.1e')})" if n else "")
        calls = n.get("attention_calls") or []
        per_call = ("" if not calls else "not compared (TORCH_REFERENCE is the reference)" if not any(c["checked"] for c in calls)
                    else f"{fnum(n.get('attention_max_rel_err'), '.2e')} ({fnum(n.get('tolerance'), 'g')})")
        verdict = n.get("verdict", "")
        verdict = f"**{verdict}**" if verdict == WRONG else verdict
        twin = s.get("same_as", "") + (f" @ {s['same_as_point']}" if s.get("same_as_point") else "")
        note = "; ".join(filter(None, [f"same as {twin}" if twin else "",
                                       s.get("error", "")]))
        cap = s.get("capacity") or {}
        L.append(f"| {s['preset']} | {sel_label(s)} | {s['kv']} | {be('sliding_window')} | {be('full_attention')} | "
                 f"{per_call} | {num} | {verdict} | {fnum(n.get('fp8_quant_rel_err'), '.1e')} | {fnum(cap.get('tokens'))} | "
                 f"{fnum((cap.get('one_sequence_windowed') or {}).get('tokens'))} | {fnum(cap.get('bytes_per_token'))} | "
                 f"{note} |")
    return L


def _throughput_md(d: dict) -> list[str]:
    """Each run's prefill and decode tok/s against HF's at its batch, HF's own rows, and HF's logits check."""
    L = ["", "## Throughput (tokens/s)", "",
         "| preset | selection | kv | batch | prefill tok/s | prefill vs HF | decode tok/s | ms/step | decode vs HF | graphs | note |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    hf = {(h["preset"], h["batch"]): h for h in d["hf"]}
    for r in d["runs"]:
        h = hf.get((r["preset"], r["batch"]), {})
        ratio = (f"{r['decode_tok_s'] / h['decode_tok_s']:.1f}x" if r.get("decode_tok_s") and h.get("decode_tok_s")
                 else "")
        pre = (f"{r['prefill_tok_s'] / h['prefill_tok_s']:.2f}x" if r.get("prefill_tok_s") and h.get("prefill_tok_s")
               else "")
        L.append(f"| {r['preset']} | {sel_label(r)} | {r['kv']} | {r['batch']} | {fnum(r.get('prefill_tok_s'))} | {pre} | "
                 f"{fnum(r.get('decode_tok_s'), ',.1f')} | {fnum(r.get('decode_ms_per_step'), '.2f')} | {ratio} | "
                 f"{'on' if r.get('cuda_graphs') else 'off' if 'cuda_graphs' in r else ''}"
                 f"{' +prefill' if r.get('prefill_graph_steps') else ''} | "
                 f"{r.get('error') or '; '.join(r.get('notes') or [])} |")
    for h in d["hf"]:
        L.append(f"| {h['preset']} | HF transformers sdpa | auto | {h['batch']} | {fnum(h.get('prefill_tok_s'))} | 1.00x | "
                 f"{fnum(h.get('decode_tok_s'), ',.1f')} | {fnum(h.get('decode_ms_per_step'), '.2f')} | 1.0x |  | "
                 f"{h.get('error', '')} |")
    ran = {}
    for r in d["runs"]:
        if r.get("kernels"):
            ran.setdefault((r["preset"], sel_label(r), r["kv"]), r["kernels"])
    if ran:
        L += ["", "Kernels that ran (the engine's backend and library build per group):"]
        L += [f"- {p} {s} kv={kv}: " + "; ".join(f"{g}: {k}" for g, k in ks.items()) for (p, s, kv), ks in ran.items()]
    checks = [(n, p["hf_check"]) for n, p in d["presets"].items() if p.get("hf_check")]
    if checks:
        L += ["", "HF logits check (before timing): " + "; ".join(
            f"{n}: max rel err {fnum(c.get('max_rel_err'), '.2e')} (bar {fnum(c.get('tolerance'), 'g')}, {c.get('verdict')}, "
            f"argmax agree {fnum(c.get('argmax_agree'), '.2f')})" if "max_rel_err" in c else f"{n}: {c.get('error')}"
            for n, c in checks)]
    return L


def _prefill_md(d: dict) -> list[str]:
    """B1 prefills of one prompt, whole or chunked, against HF's."""
    if not d.get("prefills"):
        return []
    L = ["", "## Prefill, batch 1 (one prompt; chunk = Engine max_step_tokens, whole = one step)", "",
         "| preset | selection | kv | prompt | chunk | prefill tok/s | vs HF | ms | note |", "|---|---|---|---|---|---|---|---|---|"]
    hfp = {(r["preset"], r["prompt_len"]): r.get("prefill_tok_s") for r in d["prefills"] if r["selection"] == HF}
    for r in d["prefills"]:
        base = hfp.get((r["preset"], r["prompt_len"]))
        vs = f"{r['prefill_tok_s'] / base:.2f}x" if base and r.get("prefill_tok_s") else ""
        L.append(f"| {r['preset']} | {sel_label(r)} | {r['kv']} | {r['prompt_len']} | {r.get('chunk') or 'whole'} | "
                 f"{fnum(r.get('prefill_tok_s'))} | {vs} | {fnum(r.get('prefill_ms'), '.1f')} | {r.get('error', '')} |")
    return L


def _decode_profile_md(d: dict) -> list[str]:
    if not d.get("profiles"):
        return []
    L = ["", "## B1 decode step profile (eager steps, torch.profiler; ms per step by kernel category)", "",
         "| preset | selection | kv | context | attention ms | kernel ms | kernels/step | note |", "|---|---|---|---|---|---|---|---|"]
    for r in d["profiles"]:
        L.append(f"| {r['preset']} | {sel_label(r)} | {r['kv']} | {r.get('context', '')} | "
                 f"{fnum(r.get('attention_ms_per_step'), '.3f')} | {fnum(r.get('kernel_ms_per_step'), '.2f')} | "
                 f"{fnum(r.get('kernels_per_step'))} | {r.get('error', '')} |")
    return L


def _prefill_profile_md(d: dict) -> list[str]:
    if not d.get("prefill_profiles"):
        return []
    L = ["", "## B1 prefill profile (torch.profiler; ms per prefill of the prompt by kernel category)", "",
         "| preset | selection | kv | prompt | mode | attention ms | kernel ms | kernels | note |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in d["prefill_profiles"]:
        L.append(f"| {r['preset']} | {sel_label(r)} | {r['kv']} | {r.get('prompt_len', '')} | {r.get('mode', '')} | "
                 f"{fnum(r.get('attention_ms'), '.3f')} | {fnum(r.get('kernel_ms'), '.2f')} | {fnum(r.get('kernels'))} | "
                 f"{r.get('error', '')} |")
    return L


def _rounds_md(d: dict) -> list[str]:
    """The interleaved prefill rounds' spread per selection (round_spread)."""
    if not d.get("prefill_rounds"):
        return []
    L = ["", "## Interleaved prefill rounds: spread per selection", "",
         f"Slow: rounds at least {SLOW_ROUND}x the selection's median (host stalls, clock changes); "
         "the objective table compares the rounds round by round.", "",
         "| preset | kv | metric | selection | rounds | median ms | min | p95 | max | p95 / median | slow |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["prefill_rounds"]:
        sp = round_spread(r.get("prefill_ms_reps") or [])
        if sp:
            L.append(f"| {r['preset']} | {r['kv']} | {r['metric']} | {sel_label(r)} | {sp['rounds']} | "
                     f"{sp['median']:.2f} | {sp['min']:.2f} | {sp['p95']:.2f} | {sp['max']:.2f} | "
                     f"{sp['p95'] / sp['median']:.3f} | {sp['slow']} |")
    return L


def _objectives_md(d: dict) -> list[str]:
    """The objective table (objective_table) with how to read it."""
    table = objective_table(d)
    if not table:
        return []
    L = ["", "## Objectives vs objective=vllm vs single-backend pins (same run)", "",
         "Higher is better (tok/s). `same kernels as vllm`: the objective resolved to vLLM's own groups (`same prefill "
         "kernels`: it prefills on vLLM's backends, blocks and KV dtype, decoding on others), "
         "so no gain is claimed. A metric marked (interleaved) was timed in rounds that visit every selection "
         "(--prefill-rounds), not in each selection's own block: its ratios are the median of the per-round ratios "
         "with a sign-test interval [low, high; coverage over n rounds], and a verdict of faster or slower needs "
         "the interval to exclude 1 (kselect/measurement/paired.py); `graphs` there: its prefills replayed CUDA graphs "
         "(--prefill-graph-tokens), else they ran eager. Other metrics: a ratio within the metric's noise band "
         "(`band`: declared per phase in conf/objective, the spread of two selections on identical kernels in one "
         "run; `twin`: the spread of vLLM's selection measured twice in this run, where it was) is a tie, and a "
         "tie's goal is never slower than vllm beyond the band (`goal`). `*_vllm` objectives choose among the "
         "kernels vLLM ships only.", "",
         "| preset | kv | metric | vllm | objective | objective value | vs vllm | best pin | best pin value | vs best pin | band | twin | verdict | goal |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        L.append(f"| {t['preset']} | {t['kv']} | {t['metric']}{_mode(t)} | {fnum(t['vllm'], ',.1f')} | {sel_label(dict(selection=t['objective'], point=t.get('point')))} | "
                 f"{fnum(t['value'], ',.1f')} | {_ratio(t, 'vs_vllm', 'paired_vllm')} | {t.get('best_pin') or ''} | "
                 f"{fnum(t.get('best_pin_value'), ',.1f')} | {_ratio(t, 'vs_best_pin', 'paired_best_pin')} | "
                 f"±{t['noise_band']:.1%} | {_pct(t.get('twin_spread'))} | "
                 f"{t['verdict']} | {t.get('goal', '')} |")
    return L
