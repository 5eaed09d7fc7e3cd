"""kselect's `rules=vllm_0_33_0` against a committed sample of vLLM 0.33.0's own selections.

The fixture is a slice of the oracle's records (the oracle ran vLLM 0.33.0's Python
sources; kselect/measurement/vllm/make_fixture.py picked cells covering every disagreement class the base
rules have), so CI checks agreement without downloading vLLM. Every field of every cell must
agree: backend, FA version, kernel block (a per-layer "mixed" one as a set: kselect's
draft_shared_kernel_block), KV block, quant-query, and whether vLLM refuses.
"""

from pathlib import Path

import pytest

from kselect.oracle.cells import FIELDS
from kselect.oracle.compare import classes, compare, load_records, where

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_33_0_sample.jsonl"



@pytest.fixture(scope="module")
def report():
    return compare(load_records(FIXTURE), rules="vllm_0_33_0")


def test_fixture_covers_the_grid():
    recs = load_records(FIXTURE)
    assert 100 <= len(recs) <= 200
    cells = [r["cell"] for r in recs]
    assert {c["cc"] for c in cells} == {"8.0", "8.9", "9.0", "10.0", "12.0"}
    assert {c["spec"] for c in cells} == {"none", "mtp"}
    assert {c["multimodal"] for c in cells} == {False, True}
    assert any(r["error"] for r in recs) and any(not r["error"] for r in recs)


@pytest.mark.parametrize("field", FIELDS)
def test_vllm_0_33_0_rules_agree(report, field):
    bad = [d for d in report.disagreements if d.field == field]
    msg = "\n".join(f"{len(ds)} x {cause}\n    where {where(ds)}\n    e.g. {ds[0].key}"
                    for f, cause, ds in classes(report) if f == field)
    assert not bad, f"{len(bad)} {field} disagreements with vLLM 0.33.0:\n{msg}"


def test_fixture_holds_the_draft_classes_that_once_differed():
    """MTP drafts in vision mode on SM90 with an FP8 cache (vLLM selects them as text-only layers)
    and vLLM's per-layer ("mixed") kernel block where they share a split KV-cache group: both in
    the fixture, both agreeing above."""
    recs = load_records(FIXTURE)
    drafts = [r for r in recs if r["cell"]["cc"] == "9.0" and r["cell"]["multimodal"] and r["cell"]["spec"] == "mtp"
              and str(r["cell"]["kv_cache"]).startswith("fp8") and not r["error"]]
    assert any(r["groups"]["draft:sliding_window"]["backend"] == "FLASHINFER" for r in drafts)
    assert any(g.get("kernel_block") == "mixed" and g.get("mixed") for r in recs for g in r["groups"].values())
