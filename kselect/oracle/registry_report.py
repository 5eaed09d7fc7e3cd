"""Per architecture, how kselect fares on the registry grid: agrees (every field of every cell), refused by name,
disagrees, or not buildable (vLLM raised while making the engine or the model in every cell: listed with its
error, counted in neither figure). Two figures: architectures agreeing among those kselect accepts, and cells
agreeing among all buildable ones with a refusal by name counted as a failed cell."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kselect.oracle.cells import Cell
from kselect.oracle.compare import Report

REFUSED_BY_NAME = "is not an architecture kselect models"
BUILD_STAGES = ("engine_config", "engine_args", "layer_init")


@dataclass
class ArchResult:
    arch: str
    cells: int = 0
    selects: int = 0  # cells where vLLM selects
    agree: int = 0  # cells agreeing on every field
    refused: int = 0  # cells kselect refuses by name
    build_errors: list[str] = field(default_factory=list)
    example: str = ""  # a disagreement's cause

    @property
    def status(self) -> str:
        if self.build_errors and len(self.build_errors) == self.cells:
            return "not buildable"
        if self.refused == self.cells:
            return "refused by name"
        return "agrees" if self.agree == self.cells else "disagrees"


def per_architecture(records: list[dict], kselect: dict[str, dict], rep: Report) -> dict[str, ArchResult]:
    bad = defaultdict(list)
    for d in rep.disagreements:
        bad[d.key].append(d.cause)
    out: dict[str, ArchResult] = {}
    for r in records:
        c = Cell.from_dict(r["cell"])
        a = out.setdefault(c.model, ArchResult(c.model))
        a.cells += 1
        err = r.get("error")
        a.selects += not err
        if err and err.get("stage") in BUILD_STAGES:
            a.build_errors.append(f"{err['type']}: {err['message'][:160]}")
        a.refused += REFUSED_BY_NAME in (kselect[c.key].get("error") or "")
        if bad.get(c.key):
            a.example = a.example or bad[c.key][0]
        else:
            a.agree += 1
    return out


def figures(results: dict[str, ArchResult]) -> dict:
    built = [a for a in results.values() if a.status != "not buildable"]
    accepted = [a for a in built if a.status != "refused by name"]
    cells = sum(a.cells for a in built)
    ok_cells = sum(a.agree for a in built) - sum(min(a.refused, a.agree) for a in built)
    return {"architectures": len(results), "buildable": len(built), "accepted": len(accepted),
            "agree": sum(a.status == "agrees" for a in accepted),
            "refused": sorted(a.arch for a in built if a.status == "refused by name"),
            "disagree": sorted(a.arch for a in accepted if a.status == "disagrees"),
            "not_buildable": {a.arch: a.build_errors[0] for a in results.values() if a.status == "not buildable"},
            "accepted_agreement": sum(a.status == "agrees" for a in accepted) / len(accepted) if accepted else 1.0,
            "cells": cells, "cell_agreement": ok_cells / cells if cells else 1.0}


def render(results: dict[str, ArchResult], figs: dict, grid: str = "Registry") -> str:
    """The report; `grid`: Registry, or Wrappers (its "architectures" are the grid's configs)."""
    out = [f"{grid} grid: {figs['architectures']} architectures, {figs['buildable']} buildable on CPU, "
           f"{figs['accepted']} accepted by kselect.",
           f"- agreement on accepted architectures (every field of every cell): {figs['agree']}/{figs['accepted']} "
           f"= {100 * figs['accepted_agreement']:.1f}%",
           f"- agreement over all {figs['cells']} cells, a refusal by name counted as failed: "
           f"{100 * figs['cell_agreement']:.1f}%", "", "| architecture | status | cells | vLLM selects | agree | note |",
           "|---|---|---:|---:|---:|---|"]
    for a in sorted(results.values(), key=lambda x: x.arch):
        note = a.build_errors[0] if a.status == "not buildable" else a.example
        out.append(f"| {a.arch} | {a.status} | {a.cells} | {a.selects} | {a.agree} | {note.replace('|', '/')[:140]} |")
    return "\n".join(out) + "\n"
