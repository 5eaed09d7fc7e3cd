"""A Selection as a terminal table, JSON or Markdown (vLLM arguments: vllm_export.py; by output name: formats.py)."""

from __future__ import annotations

import json

from ..outputs import notes
from ..outputs.selection import GroupSelection, Selection
from ..base.texts import layer_ranges

COLUMNS = ("group", "layers", "head", "backend", "fa", "kernel_blk", "kv_blk", "kv_dtype", "quant_q", "descale", "kv_scales")


def group_name(g: GroupSelection) -> str:
    return g.id


def row(g: GroupSelection) -> tuple[str, ...]:
    layers = f"{len(g.layers)} ({layer_ranges(list(g.layers))})"
    if g.reads_from:
        layers += f" <- {list(g.reads_from)}"
    return (
        group_name(g), layers, str(g.head_size), g.backend,
        (str(g.flash_attn_version) if g.flash_attn_version else "-") + (f"+{g.build}" if g.build else ""),
        str(g.kernel_block_size), str(g.kv_block_size), g.kv_cache_dtype,
        "yes" if g.quant_query else "no", g.descale, g.kv_scales,
    )  # fmt: skip


def header(sel: Selection) -> str:
    e = sel.environment
    cc = ".".join(map(str, e["compute_capability"])) if e["compute_capability"] else "-"
    spec = e["spec_decode"] + (f" (k={e['num_speculative_tokens']})" if e["spec_decode"] != "none" else "")
    return (
        f"platform {e['platform']} ({e['device']}, cc {cc}, packages: {', '.join(e['packages']) or 'none'})\n"
        f"model {e['model']} {e['dtype']}{' multimodal' if e['multimodal'] else ''}; kv cache {kv_cache_text(e)} "
        f"({e['kv_scales']} scales); spec decode {spec}; rules {e.get('rules')}; overlays {e['overlays'] or '[]'}; cache block {sel.block_size}"
    )


def kv_cache_text(e: dict) -> str:
    """The KV dtype as configured, and where a quantized checkpoint decided `auto`, what it became and why."""
    src = e.get("kv_cache_dtype_source")
    return f"{e['kv_cache_dtype']} -> {e['kv_cache_dtype_resolved']} (from {src})" if src else e["kv_cache_dtype"]


def table(sel: Selection, verbose: bool = False) -> str:
    rows = [COLUMNS] + [row(g) for g in sel.groups]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [header(sel), "", fmt(rows[0]), fmt(tuple("-" * w for w in widths))] + [fmt(r) for r in rows[1:]]
    out.append("")
    if sel.trace:
        out.append(f"model rules: {', '.join(sel.trace)}")
    for g in sel.groups:
        out.append(f"{group_name(g)}:")
        out.append(f"  layer facts: {layer_facts(g)}")
        out += [f"  why: {r}" for r in g.reasons]
        if g.prefill:
            out.append(f"  prefill on: {phase_line(g)}")
        for name, reasons in g.rejected.items():
            out.append(f"  rejected {name}: {'; '.join(r.text for r in reasons)}")
        if verbose:
            out.append(f"  trace: {' -> '.join(g.trace)}")
            out += [f"  claim {c.text}" for c in g.claims]
        out += [f"  WARNING: {w.text}" for w in notes.shown(g.warnings, verbose)]
    out += [f"WARNING: {w.text}" for w in notes.shown(sel.warnings, verbose)]
    note = "" if verbose else notes.summary(sel.all_warnings())
    return "\n".join(out + ([note] if note else []))


def layer_facts(g: GroupSelection) -> str:
    """What the rules read of the group's layers (head, KV heads, window, sinks, sparsity, layer type)."""
    parts = [f"head {g.head_size}", f"{g.num_kv_heads} kv heads",
             f"sliding window {g.sliding_window}" if g.sliding_window else "no sliding window",
             "attention sinks" if g.sinks else "no sinks"]
    parts += ["sparse (indexer)"] if g.sparse else []
    parts += [f"layer type {g.mamba_type}"] if g.mamba_type else []
    parts += ["mm-prefix (bidirectional image spans)"] if g.mm_prefix else []
    return ", ".join(parts)


def phase_line(g: GroupSelection) -> str:
    p = g.prefill
    return (f"{p.label} (kernel block {p.kernel_block_size} over the same kv block {p.kv_block_size}, "
            f"{p.kv_cache_dtype}, descale {p.descale}); decode on {g.label}")


def as_dict(sel: Selection) -> dict:
    d = sel.model_dump(mode="json")
    for g in d["groups"]:
        g["rejected"] = {k: list(v) for k, v in g["rejected"].items()}
        for key in ("measured", "prefill", "build"):  # objective=vllm: the output stays what it was
            if not g[key]:
                del g[key]
        if g.get("prefill"):
            g["prefill"] = {k: v for k, v in g["prefill"].items()
                            if k not in ("measured", "prefill") and not (k == "build" and v is None)}
    return d


def json_object(sel: Selection) -> dict:
    """The `output=json` object: the selection with its schema_version (docs/selection.schema.json, json_schema.py)."""
    from .json_schema import SCHEMA_VERSION  # noqa: PLC0415

    return {"schema_version": SCHEMA_VERSION, **as_dict(sel)}


def to_json(sel: Selection) -> str:
    return json.dumps(json_object(sel), indent=2)


def markdown(sel: Selection) -> str:
    out = ["**kselect selection** — " + header(sel).replace("\n", "; "), ""]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "---|" * len(COLUMNS))
    out += ["| " + " | ".join(row(g)) + " |" for g in sel.groups]
    notes = [(group_name(g), w.text) for g in sel.groups for w in g.warnings] + [("", w.text) for w in sel.warnings]
    measured = [(group_name(g), m.text()) for g in sel.groups for m in g.measured]
    measured += [(group_name(g), "prefill on " + phase_line(g)) for g in sel.groups if g.prefill]
    if measured:
        out.append("")
        out += [f"- **{n}**: {t}" for n, t in measured]
    if notes:
        out.append("")
        out += [f"- :warning: {('**' + n + '**: ') if n else ''}{w}" for n, w in notes]
    rej = [(group_name(g), n, r) for g in sel.groups for n, r in g.rejected.items()]
    if rej:
        out += ["", "<details><summary>rejected backends</summary>", ""]
        out += [f"- {gn}: **{n}**: {'; '.join(x.text for x in r)}" for gn, n, r in rej]
        out += ["", "</details>"]
    return "\n".join(out)


def per_phase_losses(sel: Selection, exported: Selection | None = None) -> list[str]:
    """Choices vLLM cannot express, and what the vLLM command above loses: per-phase backends (vLLM runs one backend
    per layer kind for every step), and a kernel build vLLM does not ship (vocab.ALT_BUILDS), where `exported` is
    the best choice made of vLLM's own kernels that the command runs instead (selector/vllm_export.vllm_kernels)."""
    exported = exported or sel
    out = []
    if exported is not sel:
        kernels = ", ".join(f"{group_name(g)} {g.label}" for g in exported.groups if not g.draft)
        loss = (f": {exported.request_ms:.4g} vs {sel.request_ms:.4g} ms of attention per request "
                f"(+{exported.request_ms / sel.request_ms - 1:.1%})"
                if exported.request_ms and sel.request_ms and sel.request_ms != float("inf") else "")
        out.append(f"the objective's best runs a build vLLM does not ship; the command above runs the best choice made "
                   f"of vLLM's own kernels ({kernels}), which loses the measured request time{loss}")
    for g in sel.groups:
        if g.draft:
            continue
        runs = next(x for x in exported.groups if x.kind == g.kind and not x.draft).label
        if g.build:
            dec = next((m for m in g.measured if m.phase == "decode"), None)
            same = dec.figure_of(runs) if dec else None
            lost = (f"; it loses the measured decode gain: {dec.chosen.backend} {dec.chosen.ms:.4g} ms vs {same.backend} "
                    f"{same.ms:.4g} ms per layer at {dec.point}") if dec and dec.chosen and same else ""
            out.append(f"{group_name(g)} runs {g.label}, a build vLLM does not ship; the command above runs {runs} "
                       f"there{lost}")
        if not g.prefill:
            continue
        pre = next((m for m in g.measured if m.phase == "prefill"), None)
        same = pre.figure_of(runs) if pre else None
        lost = ""
        if pre and pre.chosen and same:
            lost = (f"; it loses the measured prefill gain: {pre.chosen.backend} {pre.chosen.ms:.4g} ms vs "
                    f"{same.backend} {same.ms:.4g} ms per layer at {pre.point}")
        out.append(f"{group_name(g)} prefills on {g.prefill.label} and decodes on {g.label} (per-phase backends); "
                   f"the command above runs both phases on {runs}{lost}")
    return out
