"""A Selection as a terminal table, JSON, Markdown, or vLLM engine arguments."""

from __future__ import annotations

import json

from .resolve import _ranges
from .selection import GroupSelection, Selection

COLUMNS = ("group", "layers", "head", "backend", "fa", "kernel_blk", "kv_blk", "kv_dtype", "quant_q", "descale", "kv_scales")


def group_name(g: GroupSelection) -> str:
    return f"draft:{g.kind}" if g.draft else g.kind


def row(g: GroupSelection) -> tuple[str, ...]:
    layers = f"{len(g.layers)} ({_ranges(list(g.layers))})"
    if g.reads_from:
        layers += f" <- {list(g.reads_from)}"
    return (
        group_name(g), layers, str(g.head_size), g.backend,
        str(g.flash_attn_version) if g.flash_attn_version else "-",
        str(g.kernel_block_size), str(g.kv_block_size), g.kv_cache_dtype,
        "yes" if g.quant_query else "no", g.descale, g.kv_scales,
    )  # fmt: skip


def header(sel: Selection) -> str:
    e = sel.environment
    cc = ".".join(map(str, e["compute_capability"])) if e["compute_capability"] else "-"
    spec = e["spec_decode"] + (f" (k={e['num_speculative_tokens']})" if e["spec_decode"] != "none" else "")
    return (
        f"platform {e['platform']} ({e['device']}, cc {cc}, packages: {', '.join(e['packages']) or 'none'})\n"
        f"model {e['model']} {e['dtype']}{' multimodal' if e['multimodal'] else ''}; kv cache {e['kv_cache_dtype']} "
        f"({e['kv_scales']} scales); spec decode {spec}; rules {e.get('rules')}; overlays {e['overlays'] or '[]'}; cache block {sel.block_size}"
    )


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
        out += [f"  why: {r}" for r in g.reasons]
        for name, reasons in g.rejected.items():
            out.append(f"  rejected {name}: {'; '.join(reasons)}")
        if verbose:
            out.append(f"  trace: {' -> '.join(g.trace)}")
            out += [f"  claim {c.claim}: {c.status}{(' (' + c.detail + ')') if c.detail else ''}" for c in g.claims]
        out += [f"  WARNING: {w}" for w in g.warnings]
    out += [f"WARNING: {w}" for w in sel.warnings]
    return "\n".join(out)


def as_dict(sel: Selection) -> dict:
    d = sel.model_dump(mode="json")
    for g in d["groups"]:
        g["rejected"] = {k: list(v) for k, v in g["rejected"].items()}
    return d


def to_json(sel: Selection) -> str:
    return json.dumps(as_dict(sel), indent=2)


def markdown(sel: Selection) -> str:
    out = ["**kselect selection** — " + header(sel).replace("\n", "; "), ""]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "---|" * len(COLUMNS))
    out += ["| " + " | ".join(row(g)) + " |" for g in sel.groups]
    notes = [(group_name(g), w) for g in sel.groups for w in g.warnings] + [("", w) for w in sel.warnings]
    if notes:
        out.append("")
        out += [f"- :warning: {('**' + n + '**: ') if n else ''}{w}" for n, w in notes]
    rej = [(group_name(g), n, r) for g in sel.groups for n, r in g.rejected.items()]
    if rej:
        out += ["", "<details><summary>rejected backends</summary>", ""]
        out += [f"- {gn}: **{n}**: {'; '.join(r)}" for gn, n, r in rej]
        out += ["", "</details>"]
    return "\n".join(out)


def render(sel: Selection, output: str, verbose: bool = False, cfg=None) -> str:
    """`output=vllm` needs the config the selection came from (the export re-resolves it as vLLM would)."""
    if output == "vllm":
        from .vllm_export import vllm_command  # noqa: PLC0415

        if cfg is None:
            raise ValueError("render(output='vllm') needs the KSelectConfig the selection was resolved from")
        return vllm_command(cfg, sel)
    return {"table": lambda: table(sel, verbose), "json": lambda: to_json(sel), "markdown": lambda: markdown(sel)}[output]()
