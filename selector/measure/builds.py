"""Kernel builds other than vLLM's (vocab.ALT_BUILDS) as objective candidates.

The rules decide what a backend may run (block sizes, dtypes, quant-query): a build of the same kernels, e.g.
flash-attention's own FA3 beside vLLM's, runs exactly what the rules resolved, so a variant is the resolved group
with its build set and its claims checked under that build's ids (`FLASH_ATTN_v3+upstream:...`). Only an objective
tries them, only where the platform says the build is installed (`platform.packages`), and the conformance file
must verify them like any kernel. vLLM cannot run them: the export names that (selector/export/render.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ..evidence.conformance_data import PATH_FIELDS, claim_checks
from ..evidence.evidence import Evidence
from ..outputs.records import ClaimsWarning
from ..config.schema import KSelectConfig
from ..outputs.selection import GroupSelection, Selection
from ..config.vocab import ALT_BUILDS

# ties keep vLLM's own build: a variant ranks this much after its backend in vLLM's priority order
BUILD_RANK = 0.25


def group_builds(cfg: KSelectConfig, g: GroupSelection, evidence: Evidence) -> list[GroupSelection]:
    """g on each other installed build of its kernel, its claims (and their warnings) checked under that build."""
    if g.draft or g.build:
        return []
    out = []
    for build, package in ALT_BUILDS.get((g.backend, g.flash_attn_version), {}).items():
        if not getattr(cfg.platform.packages, package, False):
            continue
        fields = {k: getattr(g, k) for k in PATH_FIELDS} | {"build": build}
        claims, warns = claim_checks(evidence.conformance(cfg.platform.gpu_model), cfg.platform, fields, cfg.model.dtype, g.id)
        kept = tuple(w for w in g.warnings if not isinstance(w, ClaimsWarning))
        out.append(g.model_copy(update={"build": build, "claims": claims, "warnings": kept + warns}))
    return out


def selection_builds(cfg: KSelectConfig, sel: Selection, evidence: Evidence) -> Iterator[Selection]:
    """sel with one or more of its groups on another installed build (every combination, sel itself excluded)."""
    options = [[g, *group_builds(cfg, g, evidence)] for g in sel.groups]
    for groups in itertools.product(*options):
        if any(g.build for g in groups):
            yield sel.model_copy(update={"groups": tuple(groups)})


def build_rank(sel: Selection) -> float:
    """How far a combination's builds move it down vLLM's priority order (ties keep vLLM's builds)."""
    return BUILD_RANK * sum(1 for g in sel.groups if g.build)
