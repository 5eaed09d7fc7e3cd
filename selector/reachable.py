"""The kernel runs an objective can reach for one config: every (kernel path, claim dtype, head, KV
heads, window, kernel page) that some combination of per-group pins gives, at vLLM's cache block and
at every block a relayout may take (selector/layout.py). `kselect perf` times each of them, since a
kernel's speed depends on its page and the objective reads figures at the page a group runs
(selector/figures.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .errors import SelectionError
from .figures import kv_tag
from .pins import choices, fa_pin, pinned, with_objective
from .resolve import base_facts, resolve
from .rulebook import RuleBook, rulebook
from .schema import KSelectConfig
from .vocab import path_id

# None: the rules' own cache block. Larger blocks bound what `kselect perf` times; a layout there has
# no figures, so the objective never chooses it (no guess)
BLOCKS = (None, 16, 32, 64, 128)


@dataclass(frozen=True, order=True)
class KernelRun:
    path: str  # FLASHINFER, FLASH_ATTN_v3, ...
    kv: str  # claim dtype: bf16, fp8, ...
    head: int
    num_kv_heads: int
    window: int | None
    page: int  # the kernel block size the group runs


def reachable(cfg: KSelectConfig, book: RuleBook | None = None) -> set[KernelRun]:
    """Every kernel run a valid pinned combination of this config's groups resolves to (draft groups
    aside), over the cache blocks in BLOCKS; combinations the rules refuse give none."""
    cfg = with_objective(cfg, "vllm")
    book = book or rulebook(cfg)
    prio = book.matching("priority", base_facts(cfg))
    priority = list(prio[-1].rule.priority) if prio else []
    kinds = [g.kind for g in resolve(cfg, book).groups if not g.draft]
    out: set[KernelRun] = set()
    for combo in itertools.product(*(choices(cfg, priority) for _ in kinds)):
        version = fa_pin(combo)
        if version == "mixed":
            continue
        pins = {k: n for k, (n, _) in zip(kinds, combo)}
        for block in BLOCKS:
            try:
                sel = resolve(pinned(cfg, pins, block, fa_version=version), book)
            except SelectionError:
                continue
            out.update(KernelRun(path_id(g.backend, g.flash_attn_version), kv_tag(g, cfg.model.dtype), g.head_size,
                                 g.num_kv_heads, g.sliding_window, g.kernel_block_size)
                       for g in sel.groups if not g.draft)
    return out
