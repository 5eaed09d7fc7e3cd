"""The oracle comparison itself (kselect.oracle.compare): a record that matches kselect agrees
on every field; a deliberately wrong one is reported on the right field, group and cause."""

import copy

from kselect.oracle.cells import FIELDS, Cell, grid
from kselect.oracle.compare import classes, compare, kselect_records, render, to_json

CELLS = [Cell("9.0", "gemma4_31b", "auto", False, None, "auto", "none"),
         Cell("9.0", "gemma4_31b", "auto", False, None, "auto", "mtp"),
         Cell("8.0", "gemma4_e4b", "fp8", False, None, "TRITON_ATTN", "none")]


def _records_from_kselect(ks):
    """Oracle-shaped records that say exactly what kselect says (the config's default rules)."""
    recs = []
    for c in CELLS:
        k = ks[c.key]
        groups = {g: {f: v[f] for f in ("backend", "fa_version", "kernel_block", "kv_block", "quant_query")}
                  for g, v in k["groups"].items()}
        err = None if k["error"] is None else {"stage": "selection", "type": "ValueError", "message": k["error"]}
        recs.append({"key": c.key, "cell": c.to_dict(), "groups": groups, "error": err})
    return recs


def test_grid_is_the_issue_grid():
    cells = grid()
    assert len(cells) == 5 * 4 * 6 * 2 * 3 * 4 * 2
    assert len({c.key for c in cells}) == len(cells)
    assert {c.platform for c in cells} == {"sm80", "sm89", "sm90", "sm100", "sm120"}
    assert Cell.from_dict(cells[7].to_dict()) == cells[7]


def test_identical_records_agree_everywhere():
    ks = kselect_records(CELLS, rules=None)
    rep = compare(_records_from_kselect(ks), rules=None, kselect=ks)
    assert rep.disagreements == []
    assert all(rep.rate(f) == 1.0 for f in FIELDS)
    assert rep.checks["error"] == len(CELLS)
    assert rep.checks["backend"] == sum(len(ks[c.key]["groups"]) for c in CELLS)


def test_wrong_record_is_reported_on_its_field():
    ks = kselect_records(CELLS, rules=None)
    recs = _records_from_kselect(ks)
    bad = copy.deepcopy(recs)
    bad[0]["groups"]["full_attention"]["kernel_block"] = 4096
    bad[1]["groups"]["draft:sliding_window"]["backend"] = "NOT_A_BACKEND"
    rep = compare(bad, rules=None, kselect=ks)
    got = {(d.key, d.field, d.group) for d in rep.disagreements}
    assert got == {(CELLS[0].key, "kernel_block", "full_attention"),
                   (CELLS[1].key, "backend", "draft:sliding_window")}
    assert rep.rate("kernel_block") < 1.0 and rep.rate("backend") < 1.0 and rep.rate("error") == 1.0
    assert rep.rate("fa_version") == 1.0
    d = next(d for d in rep.disagreements if d.field == "kernel_block")
    assert d.vllm == 4096 and d.kselect == ks[CELLS[0].key]["groups"]["full_attention"]["kernel_block"]
    assert "4096" in d.cause
    text = render(rep)
    assert "kernel_block" in text and CELLS[0].key in text
    assert len(classes(rep)) == 2 and to_json(rep)["fields"]["kernel_block"]["agree"] < rep.checks["kernel_block"]


def test_error_mismatch_both_ways():
    ks = kselect_records(CELLS, rules=None)
    recs = _records_from_kselect(ks)
    recs[0]["error"] = {"stage": "layer_init", "type": "ValueError", "message": "native FP8 requires SM89+"}
    ks2 = copy.deepcopy(ks)
    ks2[CELLS[1].key] = {"groups": {}, "error": "no valid backend", "block_size": None}
    rep = compare(recs, rules=None, kselect=ks2)
    errs = {d.key: d for d in rep.disagreements if d.field == "error"}
    assert set(errs) == {CELLS[0].key, CELLS[1].key}
    assert "layer_init" in errs[CELLS[0].key].cause and "kselect selects" in errs[CELLS[0].key].cause
    assert "kselect refuses" in errs[CELLS[1].key].cause
    # vLLM selected the MTP cell: each of its groups is a disagreement kselect could not match
    assert {d.group for d in rep.disagreements if d.key == CELLS[1].key and d.field == "backend"} == set(
        recs[1]["groups"])


def test_mixed_kernel_block_agrees_only_as_the_same_set():
    from kselect.oracle.compare import same_field

    vg = {"kernel_block": "mixed", "mixed": [{"kernel_block": 128}, {"kernel_block": 64}]}
    assert same_field("kernel_block", vg, {"kernel_block": 128, "draft_shared_kernel_block": 64})
    assert not same_field("kernel_block", vg, {"kernel_block": 128, "draft_shared_kernel_block": None})
    assert not same_field("kernel_block", vg, {"kernel_block": 128, "draft_shared_kernel_block": 32})
    assert same_field("backend", {"backend": "X"}, {"backend": "X"}) and not same_field("backend", {"backend": "X"}, {})


def test_an_unused_fa_pin_is_selected_as_vllm_does_and_nothing_is_left_out():
    """vLLM ignores an FA pin no layer runs (SM80: Triton only); kselect selects what vLLM selects (with
    a setting_ignored warning), so the cell is compared as it is, with the pin, and nothing is dropped."""
    c = Cell("8.0", "gemma4_e4b", "auto", False, 3, "auto", "none")
    plain = Cell("8.0", "gemma4_e4b", "auto", False, None, "auto", "none")
    ks = kselect_records([c, plain], rules="vllm_0_33_0")
    assert ks[c.key]["fa_pin_dropped"] is False and ks[c.key]["error"] is None
    assert ks[c.key]["groups"].keys() == ks[plain.key]["groups"].keys()
    for g, v in ks[c.key]["groups"].items():
        assert {f: v[f] for f in ("backend", "fa_version", "kernel_block", "kv_block")} == \
            {f: ks[plain.key]["groups"][g][f] for f in ("backend", "fa_version", "kernel_block", "kv_block")}
    rec = {"key": c.key, "cell": c.to_dict(), "error": None,
           "groups": {g: {f: v[f] for f in ("backend", "fa_version", "kernel_block", "kv_block", "quant_query")}
                      for g, v in ks[c.key]["groups"].items()}}
    rep = compare([rec], rules="vllm_0_33_0", kselect=ks)
    assert rep.fa_pin_dropped == 0 and not rep.disagreements and "pin a FlashAttention version" not in render(rep)