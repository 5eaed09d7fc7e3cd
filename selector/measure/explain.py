"""kselect explain [hydra overrides]: is an FP8 KV cache faster than the model dtype here?

    kselect explain platform=sm90 model=gemma4_31b                       # B1 decode / B1 prefill points
    kselect explain platform=sm90 model=gemma4_31b objective=throughput  # B64 decode
    kselect explain platform=sm90 model=gemma4_31b objective.decode.batch=16 output=markdown

For the model dtype and for an fp8_e4m3 cache, per layer group and phase: the measured time
(conf/perf/<gpu>.yaml, nearest bucket) of vLLM's choice and of the objective's choice (the fastest
valid, verified kernel; `objective=vllm` explains with latency's rules at the config's points), the
step total (layers x ms), the KV capacity (bytes per token, tokens in 40 GiB) and the numerics
cost (max rel err vs the fp32 reference in conf/conformance/<gpu>.yaml). Missing data reads
"no measurement", never a guess.

Headroom: what the fastest verified kernels would save over vLLM's choice in a phase, as a share of the
model's whole step where `kselect perf-steps` measured that step at exactly this point (conf/perf `steps`).
It answers "can kernel selection make this prefill faster at all?": a few percent of attention in a step of
GEMMs is a fraction of a percent end to end.
"""

from __future__ import annotations

from ..evidence.perf_data import step_id
from ..outputs import notes
from ..outputs.measured import Figure
from ..measure.figures import figure
from ..measure.pins import with_objective
from ..evidence.evidence import Evidence
from ..rules.resolve import resolved_kv_dtype
from .select import select
from ..config.schema import KSelectConfig
from ..outputs.selection import GroupSelection, Selection
from ..config.vocab import KV_BYTES, token_bytes

BUDGET_GIB = 40


def bytes_per_token(cfg: KSelectConfig, sel: Selection) -> int:
    """KV bytes one token costs over the non-shared target layers (every token kept, as e2e.py sizes it)."""
    own = {x.index for x in cfg.model.layers() if x.reads_from is None}  # KV-shared layers add no bytes
    b = KV_BYTES[resolved_kv_dtype(cfg)]
    return sum(token_bytes(g.kind, g.num_kv_heads, g.head_size, b) * sum(1 for i in g.layers if i in own)
               for g in sel.groups if not g.draft)


def rel_err(g: GroupSelection) -> float | None:
    errs = [c.rel_err for c in g.claims if c.rel_err is not None]
    return max(errs) if errs else None


def explain(cfg: KSelectConfig, evidence: Evidence) -> dict:
    obj = cfg.objective.name if cfg.objective.name != "vllm" else "latency"
    out: dict = {"model": cfg.model.name, "gpu": cfg.platform.gpu_model or cfg.platform.name, "objective": obj,
                 "decode": f"B{cfg.objective.decode.batch} x {cfg.objective.decode.context}",
                 "prefill": f"B{cfg.objective.prefill.batch} x {cfg.objective.prefill.context}", "caches": {}}
    for kv in ("auto", "fp8"):
        c = cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"dtype": kv, "scales": "unit"})})
        faithful = select(with_objective(c, "vllm"), evidence)
        chosen = select(with_objective(c, obj), evidence)
        rows = []
        for fg in (g for g in faithful.groups if not g.draft):
            og = chosen.group(fg.kind)
            for phase in ("decode", "prefill"):
                og_phase = og.prefill if phase == "prefill" and og.prefill else og
                rows.append(dict(group=fg.kind, phase=phase, layers=len(fg.layers),
                                 vllm=_fig(c, fg, phase, evidence), vllm_verified=_status(fg),
                                 best=_fig(c, og_phase, phase, evidence), best_verified=_status(og_phase),
                                 vllm_err=rel_err(fg), best_err=rel_err(og_phase)))
        bpt = bytes_per_token(c, faithful)
        out.setdefault("steps", {"prefill": measured_step(c, "prefill", evidence)})
        out["caches"][resolved_kv_dtype(c)] = dict(rows=rows, bytes_per_token=bpt,
                                                    prefill_headroom=headroom(rows, "prefill", out["steps"]["prefill"]),
                                                    tokens=BUDGET_GIB * 2**30 // bpt if bpt else None,
                                                    warnings=[w.text for w in notes.shown(_all(chosen), cfg.verbose)],
                                                    note="" if cfg.verbose else notes.summary(_all(chosen)))
    return out


def _all(sel: Selection) -> list:
    return [w for g in sel.groups for w in g.warnings] + list(sel.warnings)


def measured_step(cfg: KSelectConfig, phase: str, evidence: Evidence) -> dict | None:
    """The model's step measured at exactly this phase's point (kselect perf-steps), or None: a step at another
    context would make the share a guess."""
    pt = getattr(cfg.objective, phase)
    data = evidence.perf(cfg.platform.gpu_model)
    st = data.steps.get(step_id(cfg.model.name, phase, pt.batch, pt.context)) if data else None
    if st is None:
        return None
    return {"step": st.key, "wall_ms": st.wall_ms, "kernel_ms": st.kernel_ms, "attention_ms": st.attention_ms,
            "backends": st.backends, "graphs": st.graphs}


def headroom(rows: list[dict], phase: str, st: dict | None) -> dict | None:
    """vLLM's choice vs the fastest verified kernels over one phase's step (layers x ms), and the saving as a share of
    the measured model step; None where a group has no figure."""
    sv, sb = step(rows, phase, "vllm"), step(rows, phase, "best")
    if sv is None or sb is None:
        return None
    # an eager step pays each call's host time too: where the faster kernels cost more of it and the step is near
    # its host (bench/results/h200/rounds31/: E4B FP8 at 4,096, 1.07x its kernels), the saving may not appear
    hv, hb = step(rows, phase, "vllm", "host_ms"), step(rows, phase, "best", "host_ms")
    eager = bool(st) and not st["graphs"]
    return {"vllm_ms": sv, "best_ms": sb, "saved_ms": sv - sb,
            "share": (sv - sb) / st["wall_ms"] if st else None, "step_ms": st["wall_ms"] if st else None,
            "host_added_ms": hb - hv if eager and hv is not None and hb is not None and hb > hv else None,
            "step_over_kernels": st["wall_ms"] / st["kernel_ms"] if eager else None}


def _fig(cfg, g: GroupSelection, phase: str, evidence: Evidence) -> dict:
    f: Figure | None = figure_for(cfg, g, phase, evidence)
    # kernel_ms: the kernels alone, where ms also holds host time (a host-bound step) or a plan's share
    kern = (f.kernel_ms if f.kernel_ms is not None else f.ms) if f else None
    return {"backend": g.label, "page": g.kernel_block_size, "ms": f.ms if f else None, "bucket": f.bucket if f else None, "kernel_ms": kern,
            "host_ms": f.host_ms if f else None}


def figure_for(cfg, g, phase, evidence: Evidence):
    return figure(evidence.perf(cfg.platform.gpu_model), g, cfg, phase)


def _status(g: GroupSelection) -> str:
    st = {c.status for c in g.claims}
    return "refuted" if "refuted" in st else "unverified" if "unverified" in st else "verified"


def step(rows: list[dict], phase: str, key: str, field: str = "ms") -> float | None:
    """Layers x `field` ("ms", or "kernel_ms": the kernels alone) summed over the groups of one phase."""
    ms = [(r[key][field], r["layers"]) for r in rows if r["phase"] == phase]
    return None if any(m is None for m, _ in ms) else sum(m * n for m, n in ms)


def to_text(d: dict, markdown: bool = False) -> str:
    (mdt, a), (fdt, b) = list(d["caches"].items())
    head = (f"Is an FP8 KV cache faster than {mdt} for {d['model']} on {d['gpu']}? "
            f"(measured; decode {d['decode']}, prefill {d['prefill']}; ms per layer call, nearest bucket)")
    mine = f"{d['objective']}'s choice"  # one cache block for the whole request: a phase may run slower than vLLM's
    cols = ["group", "phase", f"{mdt}: vLLM's choice", f"fp8: vLLM's choice", f"{mdt}: {mine}", f"fp8: {mine}",
            f"fp8 / bf16 ({mine})"]
    lines = []
    for ra, rb in zip(a["rows"], b["rows"]):
        ratio = _ratio(ra["best"]["ms"], rb["best"]["ms"])
        lines.append([ra["group"], ra["phase"], _cell(ra, "vllm"), _cell(rb, "vllm"), _cell(ra, "best"), _cell(rb, "best"), ratio])
    tail = []
    for phase in ("decode", "prefill"):
        sa, sb = step(a["rows"], phase, "best"), step(b["rows"], phase, "best")
        if sa and sb:
            tail.append(f"{phase} step, all layers ({mine}): {mdt} {sa:.3g} ms, fp8 {sb:.3g} ms -> fp8 {_ratio(sa, sb)}")
        else:
            tail.append(f"{phase} step: not every group is measured (no guess)")
    st = d.get("steps", {}).get("prefill")
    for dt, c in d["caches"].items():
        h = c["prefill_headroom"]
        if h is None:
            continue
        share = (f" = {h['share']:.2%} of the model's measured prefill step ({h['step_ms']:.4g} ms wall, {st['step']}, "
                 f"vLLM's selection)") if st else \
            f" (the model's step at {d['prefill']} is not measured: kselect perf-steps; no share of it is given)"
        tail.append(f"prefill headroom ({dt}): vLLM's choice {h['vllm_ms']:.4g} ms of attention, {mine} "
                    f"{h['best_ms']:.4g} ms: {h['saved_ms']:.3g} ms saved{share}")
        if h.get("host_added_ms") and h["saved_ms"] > 0:
            tail.append(f"  note: that step runs eager (wall {h['step_over_kernels']:.2f}x its kernels) and the fastest "
                        f"kernels' calls cost {h['host_added_ms']:.3g} ms more host time (conf/perf host_ms); where the host, "
                        f"not the GPU, paces those calls, the saving does not appear")
    tail.append(f"{mine}: per group, the valid, verified kernels that serve the whole request ({d['objective']}: "
                "prefill + decode steps) fastest over one cache block; each figure at the page it reads (pN)")
    if b["bytes_per_token"]:
        tail.append(f"capacity: {mdt} {a['bytes_per_token']:,} B/token, fp8 {b['bytes_per_token']:,} B/token -> "
                    f"{a['bytes_per_token'] / b['bytes_per_token']:.1f}x the tokens ({a['tokens']:,} vs {b['tokens']:,} in {BUDGET_GIB} GiB)")
    else:  # an attention-free model: a state per sequence, no per-token cache
        tail.append("capacity: no per-token KV cache (an attention-free model keeps one state per sequence)")
    errs = lambda rows: max((r["best_err"] for r in rows if r["best_err"] is not None), default=None)  # noqa: E731
    ea, eb = errs(a["rows"]), errs(b["rows"])
    tail.append(f"numerics (max rel err vs the fp32 reference, conformance): {mdt} {_g(ea)}, fp8 {_g(eb)}")
    tail += [f"WARNING ({k}): {w}" for k, c in d["caches"].items() for w in dict.fromkeys(c["warnings"])]
    tail += list(dict.fromkeys(c["note"] for c in d["caches"].values() if c["note"]))  # one line per distinct note
    if markdown:
        t = [f"**{head}**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        t += ["| " + " | ".join(r) + " |" for r in lines]
        return "\n".join(t + [""] + [f"- {x}" for x in tail])
    widths = [max(len(str(r[i])) for r in [cols, *lines]) for i in range(len(cols))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([head, "", fmt(cols), fmt(["-" * w for w in widths]), *map(fmt, lines), "", *tail])


def _ratio(a: float | None, b: float | None) -> str:
    """fp8 (b) against the model dtype (a)."""
    if not a or not b:
        return "n/a"
    if abs(a - b) <= 1e-12 * a:
        return "same"
    return f"{a / b:.2f}x faster" if b < a else f"{b / a:.2f}x slower"


def _cell(r: dict, key: str) -> str:
    f = r[key]
    ms = f"{f['ms']:.4g} ms" if f["ms"] is not None else "no measurement"
    st = r[f"{key}_verified"]
    # the page it reads: one kernel is timed per page, and the objective may run it over another cache block
    return f"{f['backend']} p{f['page']} {ms}" + ("" if st == "verified" else f" ({st.upper()})")


def _g(x):
    return f"{x:.2g}" if x is not None else "n/a"
