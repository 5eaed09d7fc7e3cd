"""Changed cells collapsed into axis products (`sm90 × kv=fp8|fp8_e4m3 × multimodal=true`) for
review output: few patterns instead of thousands of cell ids."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


Rect = tuple[frozenset, ...]


def collapse(keys: set[tuple], universe: set[tuple], values: Sequence[Sequence]) -> list[Rect]:
    """Cover `keys` (cells as axis-value tuples) by few axis products. A product may include
    cells outside `universe` (skipped by declaration: don't-cares) but no other universe cell."""
    n = len(values)
    rects: list[Rect] = [tuple(frozenset([v]) for v in k) for k in keys]

    def exact_merges(rects: list[Rect]) -> list[Rect]:
        changed = True
        while changed:
            changed = False
            for i in reversed(range(n)):
                groups: dict[tuple, list[Rect]] = {}
                for r in rects:
                    groups.setdefault(r[:i] + r[i + 1 :], []).append(r)
                if len(groups) < len(rects):
                    changed = True
                    rects = [rs[0][:i] + (frozenset().union(*(r[i] for r in rs)),) + rs[0][i + 1 :] for rs in groups.values()]
        return rects

    rects = exact_merges(rects)
    if 1 < len(rects) <= 64:
        merged = True
        while merged:
            merged = False
            for r1, r2 in itertools.combinations(rects, 2):
                cand = tuple(x | y for x, y in zip(r1, r2))
                if all(c in keys or c not in universe for c in itertools.product(*cand)):
                    rects = [r for r in rects if not all(x <= y for x, y in zip(r, cand))] + [cand]
                    rects = exact_merges(rects)
                    merged = True
                    break
    rects = [_widen(r, keys, universe, values) for r in rects]
    order = [{v: i for i, v in enumerate(vals)} for vals in values]
    return sorted(rects, key=lambda r: [sorted(order[i][v] for v in s) for i, s in enumerate(r)])


def _widen(rect: Rect, keys: set[tuple], universe: set[tuple], values: Sequence[Sequence]) -> Rect:
    """Let an axis take every value where the extra cells are all don't-cares (shorter patterns)."""
    r = list(rect)
    for i, vals in enumerate(values):
        if len(r[i]) == len(vals):
            continue
        cand = r[:i] + [frozenset(vals)] + r[i + 1 :]
        if all(c in keys or c not in universe for c in itertools.product(*cand)):
            r = cand
    return tuple(r)


def _fmt_value(axis: str, v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


_LABEL = {"kv_cache": "kv", "spec_decode": "spec", "multimodal": "multimodal", "dtype": "dtype", "scales": "scales", "pin": "pin"}


def render_rect(rect: Rect, axes: Sequence[str], values: Sequence[Sequence]) -> str:
    parts = []
    for axis, vals, allv in zip(axes, rect, values):
        if set(vals) >= set(allv):
            continue
        ordered = [v for v in allv if v in vals]
        text = "|".join(_fmt_value(axis, v) for v in ordered)
        if len(ordered) > 1 and all(isinstance(v, str) for v in ordered):
            p = _common_prefix(ordered)
            if len(p) >= 2 and [v for v in allv if v.startswith(p)] == ordered:
                text = p + "*"
        parts.append(text if axis in ("platform", "model") else f"{_LABEL[axis]}={text}")
    return " × ".join(parts) or "every cell"


def _common_prefix(xs: list[str]) -> str:
    p = xs[0]
    for x in xs[1:]:
        while not x.startswith(p):
            p = p[:-1]
    return p
