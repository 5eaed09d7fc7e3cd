"""rules=post_pr52987 (the seed story) against the #48666-era oracle (#51): on SM100 with flash_attn_version=3 a
multimodal Gemma-4 runs its head-256 group on FLASH_ATTN FA2 (the mm-prefix check passes, FA2 runs): predicted,
with a warning; the head-512 group and every unpinned cell stay on TRITON_ATTN."""

from __future__ import annotations

import pytest

from kselect.selector.api import compose, resolve

ENV = ["rules=post_pr52987", "platform=sm100", "model=gemma4_31b", "model.multimodal=true"]


def groups(*extra):
    sel = resolve(compose([*ENV, *extra]))
    return {g.kind: g for g in sel.groups if not g.draft}


def test_fa3_pin_runs_the_sliding_group_on_fa2_with_a_warning():
    g = groups("attention.flash_attn_version=3")
    s, f = g["sliding_window"], g["full_attention"]
    assert (s.backend, s.flash_attn_version, f.backend) == ("FLASH_ATTN", 2, "TRITON_ATTN")
    assert [w.rule for w in s.warnings if w.code == "rule"] == ["fa-mm_prefix_group_on_fa2"]
    assert "image spans attend causally" in s.warnings[0].text
    assert not [w for w in f.warnings if w.code == "rule"]


@pytest.mark.parametrize("extra", [(), ("model.multimodal=false", "attention.flash_attn_version=3")])
def test_other_cells_keep_their_selection(extra):
    g = groups(*extra)
    if "model.multimodal=false" in extra:  # text-only: FlashInfer first, no mm-prefix check
        assert {x.backend for x in g.values()} == {"FLASHINFER"}
    else:
        assert {x.backend for x in g.values()} == {"TRITON_ATTN"}
    assert not [w for x in g.values() for w in x.warnings if w.code == "rule"]
