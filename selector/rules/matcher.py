"""`when` matchers: structured data with a small set of operators, compiled once.

    when:
      platform.cc_major: 9              # equals
      kv.dtype: [fp8, fp8_e4m3]         # one of
      group.head_size: {gt: 256}        # operators: eq ne in not_in gt ge lt le multiple_of
      any: [{...}, {...}]               # combinators: any / all / not
      not: {...}

No eval: a matcher can only read the facts listed in FACTS.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from ..base.errors import ConfigError
from ..config.vocab import FACTS
from .facts import Facts, fact_reader

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "in": lambda a, b: a in b,
    "not_in": lambda a, b: a not in b,
    "gt": lambda a, b: a is not None and a > b,
    "ge": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "le": lambda a, b: a is not None and a <= b,
    "multiple_of": lambda a, b: a is not None and a % b == 0,
}
_LIST_OPS = {"in", "not_in"}

Pred = Callable[[Facts], bool]


def compile_when(when: Any, key: str) -> Pred:
    """Compile a `when` mapping; `key` is its config path, for error messages."""
    if not isinstance(when, dict):
        raise ConfigError(key, when, "a mapping of fact -> condition")
    preds = [_compile_item(k, v, f"{key}.{k}") for k, v in when.items()]
    if not preds:
        return lambda facts: True
    if len(preds) == 1:
        return preds[0]
    return lambda facts: all(p(facts) for p in preds)


def facts_read(when: Any) -> set[str]:
    """The facts a `when` mapping reads (for memoizing rule evaluation on just those facts)."""
    out: set[str] = set()
    if isinstance(when, dict):
        for name, cond in when.items():
            if name in ("any", "all"):
                for c in cond:
                    out |= facts_read(c)
            elif name == "not":
                out |= facts_read(cond)
            else:
                out.add(name)
    return out


def _compile_item(name: str, cond: Any, key: str) -> Pred:
    if name in ("any", "all"):
        if not isinstance(cond, list) or not cond:
            raise ConfigError(key, cond, "a non-empty list of mappings")
        subs = [compile_when(c, f"{key}[{i}]") for i, c in enumerate(cond)]
        return (lambda f: any(p(f) for p in subs)) if name == "any" else (lambda f: all(p(f) for p in subs))
    if name == "not":
        sub = compile_when(cond, key)
        return lambda f: not sub(f)
    if name not in FACTS:
        raise ConfigError(key, name, sorted(FACTS) + ["any", "all", "not"], what="fact")
    read = fact_reader(name)
    if isinstance(cond, dict):
        checks = []
        for op, val in cond.items():
            if op not in _OPS:
                raise ConfigError(f"{key}.{op}", op, sorted(_OPS), what="operator")
            if op in _LIST_OPS and not isinstance(val, list):
                raise ConfigError(f"{key}.{op}", val, "a list")
            if op not in _LIST_OPS and isinstance(val, (list, dict)):
                raise ConfigError(f"{key}.{op}", val, "a scalar")
            if op == "multiple_of" and (not isinstance(val, int) or isinstance(val, bool) or val <= 0):
                raise ConfigError(f"{key}.{op}", val, "a positive integer")
            checks.append((_OPS[op], val))
        if not checks:
            raise ConfigError(key, cond, f"at least one operator of {sorted(_OPS)}")
        return lambda f: all(_safe(fn, read(f), v) for fn, v in checks)
    if isinstance(cond, list):
        allowed = list(cond)
        return lambda f: read(f) in allowed
    return lambda f: read(f) == cond


def _safe(fn: Callable[[Any, Any], bool], a: Any, b: Any) -> bool:
    try:
        return bool(fn(a, b))
    except TypeError:  # e.g. a string fact compared with a number: no match, not a crash
        return False
