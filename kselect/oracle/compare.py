"""kselect against the vLLM oracle, field by field.

    records = load_records("bench/results/vllm/oracle_0_33_0.jsonl.gz")
    report = compare(records, rules="vllm_0_33_0")
    print(render(report))

Per cell, the error check: both refuse, or both select. Where vLLM selected, each of its
KV-cache groups (`sliding_window`, `full_attention`, `draft:...`) is compared on backend, FA
version, kernel block, KV block and quant-query; a group kselect lacks (because it refused, or
has no such group) counts as a disagreement on every field. Disagreements are grouped by cause:
the field, the group, vLLM's value and kselect's (for errors: where vLLM raised, or kselect's
reason), with the cells they cover. No torch: kselect's selector and the records only.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from kselect.oracle.cells import FIELDS, GROUP_FIELDS, MODELS, Cell

AXES = ("cc", "model", "kv_cache", "multimodal", "fa", "backend", "spec")


def load_records(path: str | Path) -> list[dict]:
    """The oracle's JSONL (optionally .gz): one record per cell."""
    from kselect.oracle.records import records

    return list(records(path))


# ------------------------------------------------------------------------- kselect's side


def kselect_records(cells: list[Cell], rules: str | None = None, conf_dir=None,
                    hf_configs: dict[str, dict] | None = None) -> dict[str, dict]:
    """kselect's selection per cell in the oracle's record shape: {key: {"groups", "error"}}. A cell whose model
    is a key of `hf_configs` (the registry grid: an architecture's name) selects `model=hf` with that config."""
    from kselect.selector.base.errors import KSelectError
    from kselect.selector.api import CONF_DIR, Builder, resolve
    from kselect.selector.base.files import group_options

    builder = Builder(conf_dir or CONF_DIR)  # the matrix's in-process path: one compose per rules option, cached
    if rules:  # an unknown rules option fails here, once, not as a refusal per cell
        opts = group_options(conf_dir or CONF_DIR, "rules")
        if rules not in opts:
            raise KSelectError(f"rules={rules}: no such rules option; available: {', '.join(opts)}")
    config_of = kselect_configs(builder, cells, rules, hf_configs)
    out: dict[str, dict] = {}
    for c in cells:
        # every cell as kselect answers it: a refusal (exit 2) where vLLM selects is a disagreement,
        # also for a setting vLLM ignores (kselect must select as vLLM does and warn, not refuse)
        try:
            sel = resolve(config_of(c))
        except KSelectError as e:  # a SelectionError, or the config itself refused (a pin the schema rejects)
            out[c.key] = {"groups": {}, "error": _first_line(str(e)), "block_size": None}
            continue
        except Exception as e:  # noqa: BLE001 - a model kselect cannot resolve (yet) refuses: never skipped
            if c.model in MODELS:
                raise
            out[c.key] = {"groups": {}, "error": _first_line(f"kselect cannot resolve model {c.model}: "
                                                             f"{type(e).__name__}: {e}"), "block_size": None}
            continue
        groups = {}
        for g in sel.groups:
            groups[f"draft:{g.kind}" if g.draft else g.kind] = {
                "backend": g.backend, "fa_version": g.flash_attn_version, "kernel_block": g.kernel_block_size,
                "kv_block": g.kv_block_size, "quant_query": g.quant_query, "trace": list(g.trace),
                "draft_shared_kernel_block": g.draft_shared_kernel_block}
        out[c.key] = {"groups": groups, "error": None, "block_size": sel.block_size,
                      "warnings": [getattr(w, "code", str(w)) for w in getattr(sel, "warnings", ())]}
    return out


def kselect_configs(builder, cells: list[Cell], rules: str | None, hf_configs: dict[str, dict] | None):
    """A function cell -> its validated config: from one Hydra compose per rules option for all `cells`, as a matrix
    composes (a compose per cell costs about a second). Where any cell fails on the way, every cell composes on its
    own, so a refused one raises its own error (KSelectError)."""
    try:
        batch = {c.key: cfg for c, (_, cfg) in zip(cells, builder.configs([_kselect_cell(c, rules, hf_configs)
                                                                           for c in cells]))}
    except Exception:  # noqa: BLE001 - which cell failed, and how, is told cell by cell below
        batch = {}

    def config_of(c: Cell):
        if c.key in batch:
            return batch[c.key]
        ((_, cfg),) = list(builder.configs([_kselect_cell(c, rules, hf_configs)]))
        return cfg

    return config_of


def _kselect_cell(c: Cell, rules: str | None, hf_configs: dict[str, dict] | None):
    cell = _matrix_cell(c, hf_configs[c.model]) if c.model in (hf_configs or {}) else _matrix_cell(c)
    return replace(cell, rules=rules or None)


def _matrix_cell(c: Cell, hf_config: dict | None = None):
    """The oracle cell as a kselect matrix cell (pins as dotted overrides; a registry config as model.hf_config)."""
    from kselect.selector.review.matrix import Cell as MatrixCell

    pins = [] if hf_config is None else [("model.hf_config", hf_config)]
    if c.fa is not None:
        pins.append(("attention.flash_attn_version", c.fa))
    if c.backend != "auto":
        pins.append(("attention.backend", c.backend))
    return MatrixCell(platform=c.platform, model=c.model if hf_config is None else "hf", kv_cache=c.kv_cache,
                      spec_decode=c.spec, multimodal=c.multimodal,
                      pin="+".join(f"{k}={c.model if k == 'model.hf_config' else v}" for k, v in pins) or "auto",
                      pin_sets=tuple(pins))


def _first_line(s: str) -> str:
    return s.strip().split("\n")[0][:500]


# ------------------------------------------------------------------------- comparison


@dataclass
class Disagreement:
    key: str
    cell: dict
    field: str
    group: str  # "" for the error check
    vllm: object
    kselect: object
    cause: str


@dataclass
class Report:
    rules: str | None
    cells: int = 0
    checks: Counter = field(default_factory=Counter)  # field -> number of checks
    agree: Counter = field(default_factory=Counter)  # field -> number agreeing
    disagreements: list[Disagreement] = field(default_factory=list)

    def rate(self, f: str | None = None) -> float:
        if f is None:
            n, a = sum(self.checks.values()), sum(self.agree.values())
        else:
            n, a = self.checks[f], self.agree[f]
        return a / n if n else 1.0


def compare(records: list[dict], rules: str | None = None, kselect: dict[str, dict] | None = None,
            conf_dir=None, hf_configs: dict[str, dict] | None = None) -> Report:
    """Compare oracle records with kselect (resolved here unless `kselect` is given)."""
    cells = [Cell.from_dict(r["cell"]) for r in records]
    if kselect is None:
        kselect = kselect_records(cells, rules, conf_dir, hf_configs)
    rep = Report(rules=rules, cells=len(records))
    for r, c in zip(records, cells):
        _compare_one(rep, r, kselect[c.key], c)
    return rep


def _compare_one(rep: Report, v: dict, k: dict, c: Cell) -> None:
    v_err, k_err = v.get("error"), k.get("error")
    rep.checks["error"] += 1
    if bool(v_err) == bool(k_err):
        rep.agree["error"] += 1
    else:
        rep.disagreements.append(Disagreement(c.key, v["cell"], "error", "", _err_text(v_err), k_err or None,
                                              _error_cause(v_err, k_err)))
    if v_err:
        return
    for gname, vg in sorted(v["groups"].items()):
        kg = k["groups"].get(gname)
        for f in GROUP_FIELDS:
            rep.checks[f] += 1
            kv = None if kg is None else kg.get(f)
            if kg is not None and same_field(f, vg, kg):
                rep.agree[f] += 1
                continue
            if kg is None:
                cause = "kselect refused the cell" if k_err else f"kselect has no {gname} group"
            else:
                cause = f"{gname}: {f} vLLM {vg.get(f)!r} vs kselect {kv!r}"
                if f != "backend" and vg.get("backend") != kg.get("backend"):
                    cause += f" (backend vLLM {vg.get('backend')} vs kselect {kg.get('backend')})"
            rep.disagreements.append(Disagreement(c.key, v["cell"], f, gname, vg.get(f), kv, cause))


def same_field(f: str, vg: dict, kg: dict) -> bool:
    """One field of one group. vLLM reports "mixed" where layers of one kind run different kernel
    blocks (the target layers sharing a KV-cache group with MTP draft layers on another backend):
    kselect agrees if it names the same set (its kernel block and draft_shared_kernel_block)."""
    if f == "kernel_block" and vg.get(f) == "mixed" and "mixed" in vg:
        want = {x["kernel_block"] for x in vg["mixed"]}
        return kg.get("draft_shared_kernel_block") is not None and want == {kg[f], kg["draft_shared_kernel_block"]}
    return vg.get(f) == kg.get(f)


def _err_text(e) -> str | None:
    if not e:
        return None
    return f"{e['stage']}: {e['type']}: {e['message']}"


_HEX = re.compile(r"0x[0-9a-f]+")
_NUM = re.compile(r"\b\d+\b")


def _error_cause(v_err, k_err) -> str:
    if v_err:
        msg = _HEX.sub("…", v_err["message"])
        return f"vLLM raises at {v_err['stage']} ({v_err['type']}: {msg[:160]}); kselect selects"
    return f"vLLM selects; kselect refuses ({_NUM.sub('N', (k_err or '')[:160])})"


# ------------------------------------------------------------------------- rendering


def classes(rep: Report) -> list[tuple[str, str, list[Disagreement]]]:
    """Disagreements grouped by (field, cause), largest first."""
    by: dict[tuple[str, str], list[Disagreement]] = defaultdict(list)
    for d in rep.disagreements:
        by[(d.field, d.cause)].append(d)
    return sorted(((f, cause, ds) for (f, cause), ds in by.items()), key=lambda t: (-len(t[2]), t[0], t[1]))


def where(ds: list[Disagreement]) -> str:
    """The axis values a class of disagreements covers, e.g. `cc=9.0 kv=fp8|fp8_e4m3 mm=0`."""
    parts = []
    for a in AXES:
        vals = sorted({str(d.cell[a]) for d in ds})
        parts.append(f"{a}={'|'.join(vals)}")
    return " ".join(parts)


def render(rep: Report, limit: int | None = None, examples: int = 1) -> str:
    out = [f"kselect rules={rep.rules or '(config default)'} vs vLLM oracle: {rep.cells} cells, "
           f"{sum(rep.checks.values())} field checks, agreement {100 * rep.rate():.2f}%", ""]
    out.append("| field | checks | agree | rate |")
    out.append("|---|---:|---:|---:|")
    for f in FIELDS:
        out.append(f"| {f} | {rep.checks[f]} | {rep.agree[f]} | {100 * rep.rate(f):.2f}% |")
    cl = classes(rep)
    out += ["", f"## Disagreements: {len(rep.disagreements)} in {len(cl)} classes", ""]
    for f, cause, ds in cl[:limit]:
        cells = sorted({d.key for d in ds})
        out.append(f"### {f}: {cause} — {len(ds)} checks, {len(cells)} cells")
        out.append(f"- where: {where(ds)}")
        out += [f"- e.g. `{k}`" for k in cells[:max(1, examples)]]
        out.append("")
    return "\n".join(out)


def to_json(rep: Report) -> dict:
    return {"rules": rep.rules, "cells": rep.cells, "overall": rep.rate(),
            "fields": {f: {"checks": rep.checks[f], "agree": rep.agree[f], "rate": rep.rate(f)} for f in FIELDS},
            "classes": [{"field": f, "cause": cause, "checks": len(ds), "cells": sorted({d.key for d in ds}),
                         "where": where(ds)} for f, cause, ds in classes(rep)]}
