"""Rules and capabilities compiled once per composed config (once per overlay set)."""

from __future__ import annotations

from dataclasses import dataclass

from .matcher import Pred, compile_when
from .schema import KSelectConfig, Rule, Stage


@dataclass(frozen=True)
class CompiledRule:
    id: str
    rule: Rule
    pred: Pred


class RuleBook:
    def __init__(self, cfg: KSelectConfig):
        self.capabilities = cfg.capabilities
        self.orphans = tuple(cfg.orphan_tombstones())
        staged: dict[str, list[tuple[int, int, CompiledRule]]] = {}
        for idx, (rid, rule) in enumerate(cfg.active_rules().items()):
            pred = compile_when(rule.when, f"rules.{rid}.when")
            staged.setdefault(rule.stage, []).append((rule.order, idx, CompiledRule(rid, rule, pred)))
        self._stages = {s: tuple(c for _, _, c in sorted(lst, key=lambda t: t[:2])) for s, lst in staged.items()}

    def stage(self, name: Stage) -> tuple[CompiledRule, ...]:
        return self._stages.get(name, ())

    def matching(self, name: Stage, facts: dict) -> list[CompiledRule]:
        return [c for c in self.stage(name) if c.pred(facts)]


_CACHE: dict[int, tuple[KSelectConfig, RuleBook]] = {}


def rulebook(cfg: KSelectConfig) -> RuleBook:
    """The compiled book for this config's rules/capabilities (shared by configs that only
    differ in the environment, as matrix cells do via model_copy)."""
    key = id(cfg.rules)
    hit = _CACHE.get(key)
    if hit is None or hit[0].rules is not cfg.rules or hit[0].capabilities is not cfg.capabilities:
        if len(_CACHE) > 64:
            _CACHE.clear()
        hit = (cfg, RuleBook(cfg))
        _CACHE[key] = hit
    return hit[1]
