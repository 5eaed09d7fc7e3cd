"""Typed outcomes of a review diff: which fields changed on which groups, which rules explain
it, and the warning details of a block. Rendered by `diff_render.py`; `plot` reads the fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..outputs.records import ClaimCheck

ALL_GROUPS = "*"  # a change line's groups: every group of the cell
PREFILL_AS_DECODE = "same"  # a group's prefill_backend where prefill runs its decode backend


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Change(_Frozen):
    """One field that changed: `field` is a GROUP_FIELDS id or `cache_block`."""

    field: str
    a: str
    b: str


class ChangeLine(_Frozen):
    """Changes shared by a set of groups (ALL_GROUPS: every group; (): the model level);
    `event` "group_added" / "group_removed" for a group on one side only."""

    groups: tuple[str, ...]
    changes: tuple[Change, ...] = ()
    event: Literal["group_added", "group_removed"] | None = None

    @property
    def fields(self) -> set[str]:
        return {c.field for c in self.changes}


class RuleChange(_Frozen):
    """Why a cell changed: a rule fired on one side only, or a rejection appeared or disappeared."""

    event: Literal["fired", "stopped", "now_rejected", "no_longer_rejected"]
    rule: str  # a rule id, or cap.<backend>.<field> for a capability rejection
    backend: str | None = None


class ClaimsDetail(_Frozen):
    """A claims warning's claims in one group."""

    group: str
    code: Literal["claims_refuted", "claims_unverified"]
    claims: tuple[ClaimCheck, ...]


class GroupsDetail(_Frozen):
    """The groups a (group-less) warning appears in."""

    groups: tuple[str, ...]
