"""Block-size arithmetic (vLLM's MultipleOf / int kernel block entries)."""

from __future__ import annotations

from .schema import BlockSpec, MultipleOf


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
