"""The kernel runs an objective can reach for one config: every (kernel path, claim dtype, head, KV
heads, window, kernel page) that some combination of per-group pins gives at a cache block the
objective scores (selector/measure/pins.py resolutions). `kselect perf` times each of them, since a kernel's
speed depends on its page and the objective reads figures at the page a group runs
(selector/measure/figures.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..measure.figures import kv_tag
from ..measure.pins import priority_of, resolutions, with_objective
from ..evidence.evidence import Evidence
from ..rules.groups import target_groups
from ..rules.rulebook import RuleBook, rulebook
from ..config.schema import KSelectConfig
from ..outputs.selection import Selection
from ..config.vocab import path_id


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
    aside); combinations the rules refuse give none. Which runs are reachable needs no measurement."""
    cfg = with_objective(cfg, "vllm")
    book = book or rulebook(cfg)
    none = Evidence.none()
    kinds = [g.kind for g in target_groups(cfg)]  # also where vLLM's own choice fails (a pinned one may run)
    return {KernelRun(path_id(g.backend, g.flash_attn_version), kv_tag(g, cfg.model.dtype), g.head_size, g.num_kv_heads,
                      g.sliding_window, g.kernel_block_size)
            for _, _, _, sel in resolutions(cfg, book, kinds, priority_of(cfg, book), none) if isinstance(sel, Selection)
            for g in sel.groups if not g.draft}
