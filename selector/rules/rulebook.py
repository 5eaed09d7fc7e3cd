"""Rules and capabilities compiled once per composed config (once per overlay set)."""

from __future__ import annotations

from dataclasses import dataclass

from .facts import Facts, fact_reader
from .matcher import Pred, compile_when, facts_read
from ..config.schema import KSelectConfig, Rule, Stage


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
        # Matching depends only on the facts a stage's rules read: memoize on those (a matrix
        # sweep evaluates the same few combinations thousands of times).
        self._readers = {}
        for s, rules in self._stages.items():
            keys: set[str] = set()
            for c in rules:
                keys |= facts_read(c.rule.when)
                src = getattr(c.rule.flash_attn_version, "from_", None)
                if src:
                    keys.add(src)
            self._readers[s] = fact_reader(*sorted(keys))
        self._memo: dict[tuple, object] = {}

    def stage(self, name: Stage) -> tuple[CompiledRule, ...]:
        return self._stages.get(name, ())

    def read(self, name: Stage, facts: Facts):
        """The values of the facts the rules of a stage read: what the stage's outcome depends on."""
        return self._readers.get(name, _NO_READS)(facts)

    def memo(self, key: tuple, compute):
        """A value cached for this book (keys must name the stage and the facts it read)."""
        hit = self._memo.get(key, _MISS)
        if hit is _MISS:
            if len(self._memo) > 200_000:
                self._memo.clear()
            hit = self._memo[key] = compute()
        return hit

    def matching(self, name: Stage, facts: Facts) -> list[CompiledRule]:
        key = (name, self.read(name, facts))
        hit = self._memo.get(key)
        if hit is None:
            hit = self.memo(key, lambda: tuple(c for c in self.stage(name) if c.pred(facts)))
        return list(hit)


_MISS = object()
_NO_READS = fact_reader()


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
