"""`select(cfg, evidence)`: the selection a config asks for. `objective=vllm` is vLLM's own, the rules'
faithful resolution (selector/rules/resolve.py); any other objective chooses among resolutions of those
rules by measurement (objective.py). The one place that chooses between them."""

from __future__ import annotations

from ..base.errors import SelectionError
from ..config.schema import KSelectConfig
from ..evidence import kernel_versions as kv
from ..outputs.records import STRICT_CODES, Failure
from ..evidence.evidence import Evidence
from ..outputs.selection import Selection
from ..rules.resolve import resolve_rules
from ..rules.rulebook import RuleBook, rulebook
from ..measure.objective import apply_objective


def select(cfg: KSelectConfig, evidence: Evidence, book: RuleBook | None = None) -> Selection:
    book = book or rulebook(cfg)
    if cfg.objective.name == "vllm":
        sel = resolve_rules(cfg, book, evidence)
    else:
        sel = apply_objective(cfg, book, evidence)
    return with_version_warnings(cfg, sel, evidence)


def with_version_warnings(cfg: KSelectConfig, sel: Selection, evidence: Evidence) -> Selection:
    """The selection with its kernel-version warnings (data measured with other libraries than the
    release ships: evidence/kernel_versions.py), then strict=true checked."""
    have = set(sel.warnings)
    extra = [w for w in kv.selection_warnings(cfg, sel, evidence) if w not in have]
    if extra:
        sel = sel.model_copy(update={"warnings": sel.warnings + tuple(extra)})
    check_strict(cfg, sel)
    return sel


def check_strict(cfg: KSelectConfig, sel: Selection) -> None:
    """strict=true: the warnings that say vLLM ignores a setting or that data is from another kernel
    version become a refusal (exit 2), naming them."""
    if not getattr(cfg, "strict", False):
        return
    hits = [w.text for w in sel.all_warnings() if w.code in STRICT_CODES]
    if hits:
        raise SelectionError(Failure(code="strict", warnings=tuple(hits)))

