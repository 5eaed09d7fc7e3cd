"""rules=post_pr52987 (the seed story: vLLM main after the #52987 revert) against vLLM 0.28.0's own selection code,
the first release after the revert, on a committed slice of its oracle record
(bench/results/vllm/oracle_seed_0_28_0.jsonl.gz, 1,024 cells; bench/results/vllm/README.md). The fixture holds a few
cells of every class the rules disagreed on before #51 fixed them (python -m kselect.measurement.vllm.make_fixture
--classes-from), then a sample over capability x MTP x vision mode. No vLLM needed: kselect's side runs in-process."""

from __future__ import annotations

from pathlib import Path

from kselect.oracle.cells import FIELDS
from kselect.oracle.compare import classes, compare, load_records, where

FIXTURE = Path(__file__).parent / "fixtures" / "post_pr52987_vllm_0_28_0_sample.jsonl"


def _records() -> list[dict]:
    return load_records(FIXTURE)


def test_seed_rules_agree_with_the_era_code_on_every_field():
    recs = _records()
    rep = compare(recs, rules="post_pr52987")
    assert rep.cells == len(recs) >= 60  # every cell counted, nothing left out
    msg = "\n".join(f"{f}: {len(ds)} x {cause}\n    where {where(ds)}\n    e.g. {ds[0].key}"
                    for f, cause, ds in classes(rep))
    assert not rep.disagreements, f"{len(rep.disagreements)} disagreements with vLLM 0.28.0:\n{msg}"
    assert set(rep.checks) == set(FIELDS)


def _targets(r: dict) -> dict:
    return {k: g for k, g in r["groups"].items() if not k.startswith("draft:")}


def test_the_fixture_holds_each_fact_the_rules_were_fixed_for():
    recs = _records()
    # flash_attn_version=3 on SM100, multimodal: both target groups on TRITON_ATTN (no FA2 group)
    fa3 = [r for r in recs if r["cell"]["cc"] == "10.0" and r["cell"]["fa"] == 3 and r["cell"]["multimodal"]
           and r["cell"]["backend"] == "auto" and not r["error"]]
    assert fa3 and all(g["backend"] == "TRITON_ATTN" for r in fa3 for g in _targets(r).values())
    # MTP drafts select as text-only layers: FlashInfer beside a TRITON_ATTN target on SM100
    assert any(r["groups"].get("draft:sliding_window", {}).get("backend") == "FLASHINFER"
               and _targets(r)["sliding_window"]["backend"] == "TRITON_ATTN" for r in recs if not r["error"])
    # FlashInfer's SM90 metadata builder refuses sliding-window layers
    assert any(r["error"] and r["cell"]["cc"] == "9.0" and "FlashInfer backend on SM90 currently crashes"
               in r["error"]["message"] for r in recs)
