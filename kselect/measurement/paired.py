"""Two selections timed in the same interleaved rounds (kselect/measurement/prefill_rounds.py), compared round by round.

Why: within a round the two prefills ran seconds apart, so the GPU's drift over a run (clocks, temperature: 1-2% in
bench/results/h200/pdl_rule/E1/) falls on both, and the ratio of the two times in one round cancels most of it. A
fixed "within 2% is noise" rule cannot tell a real 0.6% gain from none; the spread of the per-round ratios can.

The figure is the median of the per-round ratios with a distribution-free confidence interval: the order statistics
that a sign test brackets (the number of rounds above the true median is Binomial(n, 1/2)), so no assumption about
the shape of the noise. Five rounds give at most 93.8% coverage (the min and the max), fifteen give 96.5%.
"""

from __future__ import annotations

import math
import statistics

LEVEL = 0.95


def median_ci(xs: list[float], level: float = LEVEL) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of xs: [x_(k), x_(n+1-k)] for the largest k whose coverage is at least `level`;
    with too few values for that, the min and the max and their coverage (1 - 2 / 2^n)."""
    x = sorted(xs)
    n = len(x)
    if n == 0:
        raise ValueError("median_ci needs at least one value")

    def coverage(k: int) -> float:  # P(x_(k) <= median <= x_(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) < k)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return statistics.median(x), x[k - 1], x[n - k], coverage(k)


def ratios(faster_ms: list[float], slower_ms: list[float]) -> list[float]:
    """Per round, slower_ms / faster_ms: how many times faster the first selection was (> 1: faster)."""
    if len(faster_ms) != len(slower_ms) or not faster_ms:
        raise ValueError(f"paired rounds differ in length ({len(faster_ms)} vs {len(slower_ms)}) or are empty")
    return [s / f for f, s in zip(faster_ms, slower_ms)]


def compare(a_ms: list[float], b_ms: list[float], level: float = LEVEL) -> dict:
    """a against b over the same rounds: the median speed-up of a (b_ms / a_ms), its interval, and whether a was
    faster (interval above 1), slower (below 1) or neither (the interval holds 1)."""
    med, lo, hi, cov = median_ci(ratios(a_ms, b_ms), level)
    side = "faster" if lo > 1.0 else "slower" if hi < 1.0 else "equal"
    return dict(ratio=med, low=lo, high=hi, coverage=cov, rounds=len(a_ms), side=side)


def fmt(c: dict) -> str:
    """1.016 [1.004, 1.022; 96% over 15 rounds]"""
    return f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}; {c['coverage']:.0%} over {c['rounds']} rounds]"
