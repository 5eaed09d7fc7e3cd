"""Per-group backend pins: how the objective asks the rules for one combination of backends
(`attention.backend_per_kind`, one global FlashAttention version), and vLLM's priority order."""

from __future__ import annotations

import itertools

from ..base.errors import SelectionError
from ..rules.groups import target_groups
from ..evidence.evidence import Evidence
from ..rules.resolve import base_facts, prelude, resolve_rules
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
    upd = {"attention": cfg.attention.model_copy(update=att)}  # the objective stays: resolve_rules never reads it
    if block is not None:
        upd["kv_cache"] = cfg.kv_cache.model_copy(update={"block_size": block})
    return cfg.model_copy(update=upd)


def resolve_pinned(cfg: KSelectConfig, book: RuleBook, evidence: Evidence, kinds: dict[str, str], block: int | None = None,
                   fa_version: int | None = None):
    """resolve_rules(pinned(cfg, kinds, block, fa_version), book, evidence), or raise its SelectionError. A search
    asks the same combination again and again (over 60% repeats), and the matrix's neighbouring cells (pins
    fa3 and bs16 of one environment) ask what the `auto` cell asked: kept by what the resolution reads, the
    config's content with the pinned settings as pinned() sets them (see _content_key)."""
    att = cfg.attention
    key = (tuple({**att.backend_per_kind, **kinds}.items()),  # in pinned()'s order: the environment lists them so
           cfg.kv_cache.block_size if block is None else block,
           att.flash_attn_version if fa_version is None else fa_version)
    memo = _memo_for(cfg, book, evidence)
    hit = memo.get(key)
    if hit is None:
        cfg = _pinned_kept(memo, cfg, key)
        pre, err = _kept(memo, ("prelude", *key[1:]), lambda: prelude(cfg, book, evidence))  # reads no per-group pin
        hit = memo[key] = (None, err) if err is not None else _kept(memo, key, lambda: resolve_rules(cfg, book, evidence, pre))
    if hit[1] is not None:
        raise hit[1].with_traceback(None)
    return hit[0]


def _pinned_kept(memo: dict, cfg: KSelectConfig, key: tuple) -> KSelectConfig:
    """pinned(cfg, ...) for the memo key (its per-group pins, cache block and FlashAttention version, as pinned()
    sets them), its sections made once per content: five cache blocks share an attention section."""
    pins, block, version = key
    att = memo.get(("attention", pins, version))
    if att is None:
        att = memo[("attention", pins, version)] = cfg.attention.model_copy(
            update={"backend_per_kind": dict(pins), "flash_attn_version": version})
    kv = memo.get(("kv_cache", block))
    if kv is None:
        kv = memo[("kv_cache", block)] = cfg.kv_cache.model_copy(update={"block_size": block})
    return cfg.model_copy(update={"attention": att, "kv_cache": kv})


def _kept(memo: dict, key: tuple, compute) -> tuple:
    """memo[key] = (compute(), None), or (None, the SelectionError it raised)."""
    hit = memo.get(key)
    if hit is None:
        try:
            hit = memo[key] = (compute(), None)
        except SelectionError as e:
            hit = memo[key] = (None, e)
    return hit


def _memo_for(cfg: KSelectConfig, book: RuleBook, evidence: Evidence) -> dict:
    """The resolutions kept for configs of cfg's content (the pinned settings aside) under this book and
    evidence; one content at a time (a matrix lists an environment's pins next to each other)."""
    asker = _MEMO.get("asker", ())
    if len(asker) != 3 or any(x is not y for x, y in zip(asker, (cfg, book, evidence))):
        content = _content_key(cfg)
        if _MEMO.get("content") != content or asker[1] is not book or asker[2] is not evidence:
            _MEMO.clear()
            _MEMO["content"], _MEMO["memo"] = content, {}
        _MEMO["asker"] = (cfg, book, evidence)
    return _MEMO["memo"]


# the settings pinned() sets, left out of the content key (the memo key holds their pinned values)
_PINNED = {"attention": {"backend_per_kind", "flash_attn_version"}, "kv_cache": {"block_size"}, "objective": {"name"}}


def _content_key(cfg: KSelectConfig) -> tuple:
    """cfg's content as JSON per section, but for what pinned() sets and the rules/capabilities (the book's).
    A section object is dumped once (matrix cells share their sections)."""
    out = []
    for name in type(cfg).model_fields:
        if name in ("rules", "capabilities"):
            continue
        value = getattr(cfg, name)
        hit = _DUMPS.get((name, id(value)))
        if hit is None or hit[0] is not value:
            if len(_DUMPS) > 4096:
                _DUMPS.clear()
            text = cfg.model_dump_json(include={name}, exclude={name: _PINNED[name]} if name in _PINNED else None)
            hit = _DUMPS[(name, id(value))] = (value, text)
        out.append(hit[1])
    return tuple(out)


_MEMO: dict = {}  # "asker": the last (cfg, book, evidence); "content": its content key; "memo": key -> (selection, error)
_DUMPS: dict = {}  # (field, id of its value) -> (the value, kept so the id stays its own; its JSON)


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
                yield pins, rk, block, resolve_pinned(cfg, book, evidence, pins, block, version)
            except SelectionError as e:
                yield pins, rk, block, e
