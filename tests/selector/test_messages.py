"""Messages a user reads (#51): a failure's full reason everywhere, notes about the evidence as one line unless
verbose=true, measured-choice explanations that cannot contradict themselves, every per-group fact the rules read."""

from __future__ import annotations

import json

from kselect.selector.api import compose
from kselect.selector.base.errors import SelectionError, one_line
from kselect.commands.select import main as select_main
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.api import CONF_DIR
from kselect.selector.measure.explain import explain, to_text
from kselect.selector.measure.select import select
from kselect.selector.outputs.records import ClaimCheck, ClaimsWarning
from kselect.selector.review.diff import _same_notes_moved
from kselect.selector.review.matrix import Cell, resolve_cells

H200 = ["platform=sm90", "platform.gpu_model=nvidia_h200", "model=gemma4_31b"]


def out(capsys, *argv):
    assert select_main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_failure_carries_its_reason():
    [r] = resolve_cells([Cell("sm80", "gemma4_31b", kv_cache="fp8")])
    assert r.error.startswith("vLLM fails after selecting TRITON_ATTN for the sliding_window group (head 256): TRITON_ATTN: ")
    assert r.error.endswith("[triton-fp8_needs_sm89]")  # diff, sweep, gather and matrix print this text
    try:
        select(compose(["platform=sm80", "model=gemma4_31b", "kv_cache=fp8"]), Evidence.load(CONF_DIR))
    except SelectionError as e:
        assert str(e).splitlines()[0].endswith("(head 256):") and "triton-fp8_needs_sm89" in one_line(str(e))
    else:
        raise AssertionError("no failure")


def test_notes_are_one_line_unless_verbose(capsys):
    text = out(capsys, "platform=sm90", "model=llama3_1_8b")
    assert "WARNING" not in text
    [note] = [x for x in text.splitlines() if x.startswith("note: ")]
    assert "unverified on nvidia_h200" in note and "vllm_flash_attn vllm-0.33.0" in note and "verbose=true" in note
    full = out(capsys, "platform=sm90", "model=llama3_1_8b", "verbose=true")
    assert "note: " not in full and "WARNING: unverified on nvidia_h200" in full and "[kernel versions]" in full


def test_a_moved_unverified_note_is_neither_new_nor_gone():
    def w(claim):
        return ClaimsWarning(code="claims_unverified", group="full_attention", gpu="sm120",
                             claims=(ClaimCheck(claim=claim, status="unverified"),))
    a, b = {w("TRITON_ATTN:bf16:d512:page16")}, {w("TRITON_ATTN:bf16:d512:page64")}
    wa, wb = _same_notes_moved(a, b)
    assert wb - wa == set() and wa - wb == set()


def test_measured_choices_explain_without_contradiction(capsys):
    text = out(capsys, *H200, "kv_cache=fp8", "objective=latency")
    assert ("within the noise band of the fastest, TRITON_ATTN+kselect 0.02222 ms (2.1% faster; noise band: "
            "objective.tie 3%, conf/objective/latency.yaml): vLLM's priority order decides") in text
    for line in text.splitlines():
        if " chosen by objective" in line:
            label = line.split("why: ")[1].split(" chosen by objective")[0]
            assert f": {label} not chosen" not in text, label
    assert "TRITON_ATTN (vLLM's build; this group runs TRITON_ATTN+kselect) not chosen: not verified" in text


def test_explain_names_the_page_of_each_figure():
    cfg = compose([*H200, "objective=throughput"])
    t = to_text(explain(cfg, Evidence.load(CONF_DIR)))
    row = next(x for x in t.splitlines() if x.startswith("sliding_window  prefill"))
    assert "FLASH_ATTN v4 p64 0.2138 ms" in row and "FLASH_ATTN v4 p32 0.2573 ms" in row  # one kernel, two pages
    assert "fastest verified" not in t and "throughput's choice" in t


def test_sinks_and_other_group_facts_are_shown(capsys):
    text = out(capsys, "platform=sm90", "model=gpt_oss_20b")
    assert "  layer facts: head 64, 8 kv heads, sliding window 128, attention sinks" in text
    groups = json.loads(out(capsys, "platform=sm90", "model=gpt_oss_20b", "output=json"))["groups"]
    assert {g["kind"]: (g["sinks"], g["sliding_window"]) for g in groups} == {"sliding_window": (True, 128),
                                                                            "full_attention": (True, None)}
    v32 = json.loads(out(capsys, "platform=sm90", "model=deepseek_v3_2", "output=json"))["groups"]
    assert any(g["sparse"] for g in v32)
