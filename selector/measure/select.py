"""`select(cfg, evidence)`: the selection a config asks for. `objective=vllm` is vLLM's own, the rules'
faithful resolution (selector/rules/resolve.py); any other objective chooses among resolutions of those
rules by measurement (objective.py). The one place that chooses between them."""

from __future__ import annotations

from ..config.schema import KSelectConfig
from ..evidence.evidence import Evidence
from ..outputs.selection import Selection
from ..rules.resolve import resolve_rules
from ..rules.rulebook import RuleBook, rulebook
from ..measure.objective import apply_objective


def select(cfg: KSelectConfig, evidence: Evidence, book: RuleBook | None = None) -> Selection:
    book = book or rulebook(cfg)
    if cfg.objective.name == "vllm":
        return resolve_rules(cfg, book, evidence)
    return apply_objective(cfg, book, evidence)
