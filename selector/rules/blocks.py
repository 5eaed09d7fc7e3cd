"""Block-size arithmetic (vLLM's MultipleOf / int kernel block entries)."""

from __future__ import annotations

import itertools
import math

from ..config.schema import BlockSpec, MultipleOf


def supports(blocks: list[BlockSpec], size: int) -> bool:
    """A block size a backend accepts: int entries are divisors too (hybrid blocks)."""
    if not blocks:
        return True
    return any(size % (b.multiple_of if isinstance(b, MultipleOf) else b) == 0 for b in blocks)


def preferred(blocks: list[BlockSpec], default: int = 16) -> int:
    """The default if supported, else the smallest entry."""
    return default if supports(blocks, default) else smallest(blocks)


def smallest(blocks: list[BlockSpec]) -> int:
    """The smallest kernel block candidate: int entries if any, else the MultipleOf bases."""
    ints = [b for b in blocks if isinstance(b, int)]
    return min(ints) if ints else min(b.multiple_of for b in blocks)


def kernel_block_for(kv_block: int, blocks: list[BlockSpec]) -> int | None:
    """The kernel block a group runs with: the kv block itself if the backend accepts it
    (int entries need equality), else the largest int entry dividing it."""
    for b in blocks:
        if (isinstance(b, MultipleOf) and kv_block % b.multiple_of == 0) or b == kv_block:
            return kv_block
    divisors = [b for b in blocks if isinstance(b, int) and kv_block % b == 0]
    return max(divisors) if divisors else None


def common_kernel_block(kv_block: int, per_backend: list[list[BlockSpec]]) -> int | None:
    """The kernel block of a KV-cache group several backends share: the kv block if every
    backend takes it (int entries by equality), else the largest int entry of any backend that
    divides it and every backend takes (vLLM's select_common_block_size)."""

    def takes(blocks: list[BlockSpec], size: int) -> bool:
        return any((isinstance(b, MultipleOf) and size % b.multiple_of == 0) or b == size for b in blocks)

    cands = {kv_block} | {b for bl in per_backend for b in bl if isinstance(b, int) and kv_block % b == 0}
    for size in sorted(cands, reverse=True):
        if all(takes(bl, size) for bl in per_backend):
            return size
    return None


def largest_within(blocks: list[BlockSpec], cache_block: int) -> int:
    """vLLM's _largest_kernel_block_within with the page budget of one cache block: int
    entries and, per MultipleOf, its largest multiple up to the cache block; the largest that
    fits, else the smallest candidate."""
    cands = [b for b in blocks if isinstance(b, int)]
    cands += [max(b.multiple_of, cache_block // b.multiple_of * b.multiple_of) for b in blocks if isinstance(b, MultipleOf)]
    fitting = [b for b in cands if b <= cache_block]
    return max(fitting) if fitting else min(cands)


def intersect(a: list[BlockSpec], b: list[BlockSpec]) -> list[BlockSpec]:
    """Kernel blocks two backends sharing one cache both run (a composite's children)."""
    out: list[BlockSpec] = []
    for x in a:
        for y in b:
            if isinstance(x, MultipleOf) and isinstance(y, MultipleOf):
                c = MultipleOf(multiple_of=math.lcm(x.multiple_of, y.multiple_of))
            elif isinstance(x, MultipleOf):
                c = y if y % x.multiple_of == 0 else None
            elif isinstance(y, MultipleOf):
                c = x if x % y.multiple_of == 0 else None
            else:
                c = x if x == y else None
            if c is not None and c not in out:
                out.append(c)
    return out


def common(per_backend: list[list[BlockSpec]], default: int = 16) -> int | None:
    """One cache block every backend accepts: the default if all do, else the smallest LCM of
    one size per backend that all accept (vLLM's _preferred_block_size_for_backends)."""
    if all(supports(b, default) for b in per_backend):
        return default
    sizes = [[s.multiple_of if isinstance(s, MultipleOf) else s for s in b] or [1] for b in per_backend]
    for cand in sorted({math.lcm(*combo) for combo in itertools.product(*sizes)}):
        if all(supports(b, cand) for b in per_backend):
            return cand
    return None
