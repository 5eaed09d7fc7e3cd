"""kselect's `rules=vllm_0_33_0` against a committed sample of vLLM 0.33.0's own selections.

The fixture is a slice of the oracle's records (bench/vllm/oracle.py ran vLLM 0.33.0's Python
sources; bench/vllm/make_fixture.py picked cells covering every disagreement class the base
rules have), so CI checks agreement without downloading vLLM. Every field of every cell must
agree: backend, FA version, kernel block, KV block, quant-query, and whether vLLM refuses.
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
