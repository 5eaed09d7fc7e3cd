"""Per-group backend pins: how the objective asks the rules for one combination of backends
(`attention.backend_per_kind`, one global FlashAttention version), and vLLM's priority order."""

from __future__ import annotations

import itertools

from ..base.errors import SelectionError
from ..rules.groups import target_groups
from ..evidence.evidence import Evidence
from ..rules.resolve import base_facts, resolve_rules
from ..rules.rulebook import RuleBook
from ..config.schema import KSelectConfig

# None: the rules' own cache block. Larger blocks bound what `kselect perf` times (selector/measure/reachable.py);
# a layout there has no figures, so the objective never chooses it (no guess)
BLOCKS = (None, 16, 32, 64, 128)


def with_objective(cfg: KSelectConfig, name: str) -> KSelectConfig:
    return cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"name": name})})


def pinned(cfg: KSelectConfig, kinds: dict[str, str], block: int | None = None, fa_version: int | None = None) -> KSelectConfig:
    """cfg with per-group backend pins (and a global FlashAttention version, as vLLM's
    attention_config.flash_attn_version: head-512 layers are still upgraded to FA4 by the rules)."""
    att = {"backend_per_kind": {**cfg.attention.backend_per_kind, **kinds}}
    if fa_version is not None:
        att["flash_attn_version"] = fa_version
    att = cfg.attention.model_copy(update=att)
    upd = {"attention": att, "objective": cfg.objective.model_copy(update={"name": "vllm"})}
    if block is not None:
        upd["kv_cache"] = cfg.kv_cache.model_copy(update={"block_size": block})
    return cfg.model_copy(update=upd)


def choices(cfg: KSelectConfig, priority: list[str]) -> list[tuple[str, int | None]]:
    """Per-group candidates: vLLM's priority list, plus FlashAttention 3 where the user did not pin a
    version and FA3 is installed. vLLM's attention_config.flash_attn_version=3 is a valid pin for
    Gemma-4 (only head-512 layers are then upgraded to FA4); without it, the Gemma-4 rule forces FA4
    on every layer of a bf16 model, so FA3 would never be measured against the others."""
    out = [(n, None) for n in priority]
    if "FLASH_ATTN" in priority and cfg.attention.flash_attn_version is None and cfg.platform.packages.fa3:
        out.insert(priority.index("FLASH_ATTN") + 1, ("FLASH_ATTN", 3))
    return out


def fa_pin(combo) -> int | str | None:
    """The global FlashAttention version a combination needs: 3 when a group picks FA3; "mixed" when
    another group picks FLASH_ATTN at vLLM's default version (not expressible as one setting)."""
    versions = {v for n, v in combo if n == "FLASH_ATTN"}
    return "mixed" if versions == {None, 3} else 3 if 3 in versions else None


def rank(priority: list[str], choice: tuple[str, int | None]) -> float:
    """vLLM's priority order; FA3 right after vLLM's own FlashAttention version (ties keep vLLM's)."""
    return priority.index(choice[0]) + (0.5 if choice[1] else 0.0)


def priority_of(cfg: KSelectConfig, book: RuleBook) -> list[str]:
    """vLLM's backend priority list for this config: each target group's last matching priority rule, as the
    resolver picks it from the group's facts (SM90 multimodal puts the TRITON_FLASH_ATTN composite first for
    non-draft groups only), merged in order."""
    facts, out = base_facts(cfg), []
    for g in target_groups(cfg):
        prio = book.matching("priority", facts.for_group(g))
        out += [n for n in (prio[-1].rule.priority if prio else ()) if n not in out]
    return out


def resolutions(cfg: KSelectConfig, book: RuleBook, kinds: list[str], priority: list[str], evidence: Evidence):
    """Every combination of per-group pins over `kinds` (choices(), one global FlashAttention version)
    resolved by the rules at every cache block in BLOCKS, the rules' own first. Yields (pins, priority
    rank, block, the Selection or the SelectionError that refused it)."""
    for combo in itertools.product(*(choices(cfg, priority) for _ in kinds)):
        version = fa_pin(combo)
        if version == "mixed":
            continue  # one global FlashAttention version: FA3 and vLLM's default version cannot both be pinned
        pins = {k: n for k, (n, _) in zip(kinds, combo)}
        rk = tuple(rank(priority, c) for c in combo)
        for block in BLOCKS:
            try:
                yield pins, rk, block, resolve_rules(pinned(cfg, pins, block, fa_version=version), book, evidence)
            except SelectionError as e:
                yield pins, rk, block, e
