"""Each release's rules against a committed sample of that release's own selections, and each
upgrade diff against what changed between the two releases' records. No vLLM needed.

Fixtures (tests/vllm/fixtures/vllm_<release>_sample.jsonl) are slices of the oracle's records
(kselect.oracle: the release's own Python selection chain on CPU), made by
kselect/measurement/vllm/make_fixture.py with --keys-from the 0.33.0 sample, so consecutive releases share
their cells. Every cell counts: a pin vLLM ignores is selected as vLLM selects it (with a
warning), and every cell vLLM refuses must be refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kselect.oracle.cells import FIELDS, GROUP_FIELDS, Cell
from kselect.oracle.compare import _matrix_cell, classes, compare, load_records, where

FIXTURES = Path(__file__).parent / "fixtures"
RELEASES = ("vllm_0_32_0", "vllm_0_33_0", "vllm_0_34_0")
UPGRADES = (("vllm_0_32_0", "vllm_0_33_0"), ("vllm_0_33_0", "vllm_0_34_0"))


def fixture(rules: str) -> Path:
    path = FIXTURES / f"{rules}_sample.jsonl"
    if not path.is_file():
        pytest.skip(f"no fixture {path.name} (kselect/measurement/vllm/make_fixture.py writes it from the release's oracle record)")
    return path


@pytest.fixture(scope="module", params=RELEASES)
def release_report(request):
    recs = load_records(fixture(request.param))
    return request.param, compare(recs, rules=request.param), len(recs)


def test_each_release_agrees_with_its_own_code_on_every_field(release_report):
    rules, rep, n = release_report
    assert rep.cells >= 60 and rep.cells == n  # every cell counted, nothing left out
    msg = "\n".join(f"{f}: {len(ds)} x {cause}\n    where {where(ds)}\n    e.g. {ds[0].key}" for f, cause, ds in classes(rep))
    assert not rep.disagreements, f"{len(rep.disagreements)} disagreements with {rules}'s own selections:\n{msg}"
    assert set(rep.checks) == set(FIELDS)


def _oracle_selection(r: dict) -> tuple:
    """What vLLM selected: nothing (it raised), or the cache block and each group's fields."""
    if r.get("error"):
        return (True,)
    groups = tuple(sorted((g, tuple(str(v.get(f)) for f in GROUP_FIELDS)) for g, v in (r.get("groups") or {}).items()))
    return False, r.get("block_size"), groups


def _kselect_changed(cells: list[Cell], rules_a: str, rules_b: str) -> set[str]:
    """The cells `kselect diff a.rules=.. b.rules=..` reports with a changed selection (selector/review/diff.py);
    a cell refused on both sides selects nothing on either (its reason may change: `error_changed`)."""
    from kselect.selector.review.diff import diff_cell
    from kselect.selector.review.matrix import Builder, resolve_cells

    mcells = [_matrix_cell(c) for c in cells]
    ra = resolve_cells(mcells, builder=Builder().under_rules(rules_a))
    rb = resolve_cells(mcells, builder=Builder().under_rules(rules_b))
    diffs = [diff_cell(x, y) for x, y in zip(ra, rb)]
    return {c.key for c, d in zip(cells, diffs) if d.selection_changed and d.outcome != "error_changed"}


@pytest.mark.parametrize("rules_a,rules_b", UPGRADES, ids=[f"{a}->{b}" for a, b in UPGRADES])
def test_upgrade_diff_changes_exactly_the_cells_the_releases_change(rules_a, rules_b):
    ra = {r["key"]: r for r in load_records(fixture(rules_a))}
    rb = {r["key"]: r for r in load_records(fixture(rules_b))}
    keys = sorted(set(ra) & set(rb))
    assert len(keys) >= 60, "consecutive releases' fixtures share their cells (make_fixture.py --keys-from)"
    oracle = {k for k in keys if _oracle_selection(ra[k]) != _oracle_selection(rb[k])}
    cells = [Cell.from_dict(ra[k]["cell"]) for k in keys]
    ours = _kselect_changed(cells, rules_a, rules_b)
    assert ours == oracle, (f"kselect's diff says {sorted(ours - oracle)[:5]} changed and vLLM does not; "
                            f"vLLM changes {sorted(oracle - ours)[:5]} and the diff does not")
