"""kselect gather <multirun dir> [format=table|markdown|json]: one table of a sweep.

Reads every `selection.json` that `kselect sweep -m ...` wrote under the directory
(any launcher: basic, joblib, submitit, ray), in job order, and prints one row per job: the
job's overrides, the outcome, the cache block size, the backend (FlashAttention version) and
kv block per layer group, quant-query, and the warnings (every warning in full under the table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..base.errors import KSelectError, format_validation_error, one_line
from ..base.files import FileError, read_text
from ..config.vocab import group_id


class JobRecord(BaseModel):
    """What `kselect sweep` writes per job (selection.json); anything else is refused."""

    model_config = ConfigDict(extra="forbid")
    overrides: list[str]
    outcome: Literal["ok", "invalid", "config error"]
    selection: dict | None = None
    error: str | None = None
    job: dict
    sweep: dict

    @model_validator(mode="after")
    def _shape(self) -> JobRecord:
        if not isinstance(self.job.get("num"), int) or isinstance(self.job.get("num"), bool):
            raise ValueError("job.num must be an integer")
        if not isinstance(self.sweep.get("id"), str) or not isinstance(self.sweep.get("jobs"), int):
            raise ValueError("sweep must hold id (a string) and jobs (an integer): written by kselect sweep")
        if (self.outcome == "ok") != (self.selection is not None):
            raise ValueError("selection is present exactly when outcome is 'ok'")
        groups = (self.selection or {}).get("groups", [])
        need = {"kind", "draft", "backend", "kv_block_size", "quant_query", "warnings"}
        if not isinstance(groups, list) or any(not isinstance(g, dict) or not need <= set(g) for g in groups):
            raise ValueError(f"selection.groups must be a list of groups with {sorted(need)}")
        return self


def load_jobs(root: Path) -> list[dict]:
    """Every job of ONE complete sweep under root; mixed sweeps or missing jobs are errors."""
    jobs = []
    for p in sorted(root.rglob("selection.json")):
        text = read_text(p, "a job record written by kselect sweep", limit=64 << 20)
        try:
            rec = JobRecord.model_validate(json.loads(text)).model_dump(exclude_none=True)
        except json.JSONDecodeError as e:
            raise FileError(f"{p}: not valid JSON ({e}); expected a job record written by kselect sweep") from None
        except ValidationError as e:
            raise FileError(f"{p}: {format_validation_error(e).removeprefix('invalid config: ')}") from None
        rec["_dir"] = str(p.parent.relative_to(root)) or "."
        jobs.append(rec)
    sweeps = sorted({j["sweep"]["id"] for j in jobs})
    if len(sweeps) > 1:
        raise KSelectError(f"gather: {root} mixes jobs of {len(sweeps)} sweeps ({', '.join(s[:8] for s in sweeps)}); "
                           "allowed: one sweep per directory (gather each sweep's own hydra.sweep.dir)")
    if jobs:
        want = jobs[0]["sweep"]["jobs"]
        nums = [j["job"]["num"] for j in jobs]
        missing = sorted(set(range(want)) - set(nums))
        extra = sorted({n for n in nums if nums.count(n) > 1 or not 0 <= n < want})
        if missing or extra:
            raise KSelectError(
                f"gather: {root}: sweep of {want} jobs, found {len(jobs)}"
                + (f"; missing job(s) {_nums(missing)}" if missing else "")
                + (f"; repeated or unexpected job(s) {_nums(extra)}" if extra else "")
                + " (a job that failed or is still running?)"
            )
    return sorted(jobs, key=lambda r: (r["job"]["num"], r["_dir"]))


def _nums(ns: list[int]) -> str:
    return ", ".join(map(str, ns[:10])) + (f" and {len(ns) - 10} more" if len(ns) > 10 else "")


def _group_cell(g: dict) -> str:
    v = f" v{g['flash_attn_version']}" if g.get("flash_attn_version") else ""
    return f"{g['backend']}{v} kv{g['kv_block_size']}"


def rows(jobs: list[dict]) -> tuple[list[str], list[list[str]], list[tuple[str, str]]]:
    kinds: list[str] = []
    for j in jobs:
        for g in j.get("selection", {}).get("groups", []):
            name = group_id(g["kind"], g["draft"])
            if name not in kinds:
                kinds.append(name)
    header = ["job", "overrides", "outcome", "block"] + kinds + ["quant_q", "warnings"]
    out, notes = [], []
    for j in jobs:
        sel = j.get("selection") or {}
        groups = {group_id(g["kind"], g["draft"]): g for g in sel.get("groups", [])}
        warns = [w for g in groups.values() for w in g["warnings"]] + list(sel.get("warnings", []))
        num = str(j.get("job", {}).get("num", j["_dir"]))
        notes += [(num, f"{w['group']}: {w['text']}") for w in warns]  # a record's text, rendered when it was written
        if j["outcome"] != "ok":
            notes.append((num, f"{j['outcome']}: {one_line(j.get('error') or '')}"))
        out.append(
            [num, " ".join(j.get("overrides", [])), j["outcome"], str(sel.get("block_size", "-"))]
            + [_group_cell(groups[k]) if k in groups else "-" for k in kinds]
            + ["/".join("yes" if g["quant_query"] else "no" for g in groups.values() if not g["draft"]) or "-", str(len(warns))]
        )
    return header, out, notes


def table(root: Path, jobs: list[dict]) -> str:
    header, body, notes = rows(jobs)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [f"{root}: {len(jobs)} jobs", "", fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body]
    if notes:
        out += ["", "warnings and errors:"] + [f"  [{n}] {w}" for n, w in notes]
    return "\n".join(out)


def markdown(root: Path, jobs: list[dict]) -> str:
    header, body, notes = rows(jobs)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    out = [f"**{root}**: {len(jobs)} jobs", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in body]
    if notes:
        out += [""] + [f"- :warning: job {n}: {esc(w)}" for n, w in notes]
    return "\n".join(out)
