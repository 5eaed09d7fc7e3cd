"""MTP draft layer groups: which target layer's cache each reads, and the backend it runs.

Draft layers write no KV: each reads the cache of the last non-shared target layer of its
type. How they get their backend is a `draft` rule (default `target`):
- `target`: the target group's backend (a composite: its causal child, since drafts are text
  only), the seed's model of vLLM passing the target's backend to the draft config;
- `own_selection`: a selection of their own, as text-only layers under the config's effective
  pins (a user's or a model forcing's backend and FA version carry over, the mm-prefix does
  not). vLLM 0.33.0's Gemma-4 speculator builds the drafter with the target's attention config
  (vllm/v1/worker/gpu/spec_decode/gemma4/speculator.py), and each draft layer then runs
  get_attn_backend itself. Its backend joins the model's cache-block choice, and its kernel
  block is one both it and the target backend accept (they share a KV-cache group).
"""

from __future__ import annotations

from . import blocks as blk
from ..base.errors import SelectionError
from ..config.vocab import LAYER_TYPE
from ..outputs.records import Failure
from ..outputs.selection import GroupSelection
from .candidates import Choice, choose_backend, validate, with_fa_versions
from .facts import Facts
from .groups import Group
from .rulebook import RuleBook

TARGET, OWN = "target", "own_selection"


def draft_policy(book: RuleBook, facts: Facts, trace: list[str]) -> str:
    policy = TARGET
    for c in book.matching("draft", facts):
        policy = c.rule.draft_backend
        trace.append(c.id)
    return policy


def draft_layer_groups(cfg, targets: list[Group]) -> list[Group]:
    """The drafter's layers per kind, each reading the last non-shared target layer of its type."""
    m = cfg.model
    types = m.resolved_layer_types()
    first_shared = m.num_hidden_layers - m.num_kv_shared_layers
    out = []
    for kind, ltype in LAYER_TYPE.items():  # Gemma-4's drafter: its layer_types name the target's kinds
        layers = tuple(i for i, t in enumerate(m.drafter.layer_types) if t == ltype)
        if not layers:
            continue
        target = next(t for t in targets if t.kind == kind)
        producer = max(i for i, t in enumerate(types) if t == ltype and i < first_shared)
        out.append(Group(kind, layers, target.head_size, target.num_kv_heads, target.window, True, (producer,)))
    return out


def own_choices(cfg, book: RuleBook, facts: Facts, drafts: list[Group]) -> list[Choice]:
    """Policy `own_selection`: each draft group chooses like a text-only target group would."""
    out = []
    for g in drafts:
        ch = choose_backend(cfg, book, facts, g)
        ch.trace.insert(0, "builtin.draft_selects_as_text_layer")
        ch.reasons.insert(0, f"draft layers {list(g.layers)} select their own backend as text-only layers "
                             f"(the config's pins carry over) and read target layer {g.reads_from[0]}'s cache")
        out.append(ch)
    return out


def target_choice(book: RuleBook, facts: Facts, g: Group, target: GroupSelection) -> Choice:
    """Policy `target`: the target group's backend, validated for the draft layers."""
    f = facts.for_group(g)
    comp = book.capabilities[target.backend].composite
    backend = comp.causal if comp else target.backend  # a composite's image-span route never serves drafts
    if book.capabilities[backend].flash_attn:
        f, _ = with_fa_versions(book, f, g.head_size)
    v = validate(book, f, backend)
    if v.rejections:
        raise SelectionError(Failure(code="draft_backend_invalid", group=g.kind, backend=backend), {backend: v.rejections})
    why = [f"draft layers {list(g.layers)} read target layer {g.reads_from[0]}'s cache on the target's backend"]
    return Choice(backend, target.flash_attn_version, v.kernel_blocks, v.facts, ["builtin.draft_uses_target_backend"] + v.trace, why,
                  model_kernel_blocks=v.model_kernel_blocks)


def shared_kernel_block(kv_block: int, target: Choice, draft: Choice) -> int | None:
    """The kernel block of a KV-cache group that target and draft layers share: the KV block if
    both backends take it, else the largest fixed size both take that divides it (vLLM's
    select_common_block_size over the group's backends)."""
    if draft.backend == target.backend:
        return blk.kernel_block_for(kv_block, target.kernel_blocks)
    return blk.common_kernel_block(kv_block, [target.kernel_blocks, draft.kernel_blocks])


def one_vllm_group(kind: str, groups: list[Group], first_shared: int) -> bool:
    """Whether vLLM keeps all of a kind's (non-shared) target layers in one KV-cache group. It
    splits each kind into groups of the smallest kind's size (the largest's, when that is less
    than 1.5x the smallest): vllm/v1/core/kv_cache_planning.py
    _get_kv_cache_groups_uniform_page_size. A split kind's draft-shared group is one of several."""
    counts = {g.kind: sum(1 for i in g.layers if i < first_shared) for g in groups}
    lo, hi = min(counts.values()), max(counts.values())
    size = hi if hi < 1.5 * lo else lo
    return counts[kind] <= size


def draft_note(kb: int, draft_id: str) -> str:
    return (f"the target layers sharing vLLM's KV-cache group with {draft_id} run kernel block {kb}; "
            f"kselect reports the kernel block of the group's other layers")

