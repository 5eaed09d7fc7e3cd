"""rules=post_pr52987 (the seed story) against the seed era's own vLLM code, 0.28.0, the first release after the
#52987 revert (#51; bench/results/vllm/README.md): three facts its oracle record shows, each one a rule.

- flash_attn_version=3 on SM100 with a multimodal Gemma-4: both groups resolve to FA2, which refuses the mm-prefix
  mask, and run TRITON_ATTN; vLLM ignores the pin: kselect selects as vLLM does, warns, and strict=true refuses.
- MTP drafts select as text-only layers (the Gemma-4 speculator carries only a set backend over): on SM100 a
  multimodal target runs TRITON_ATTN and its drafter FlashInfer.
- FlashInfer's metadata builder refuses sliding-window layers on SM90: a text-only FP8 Gemma-4 there (FlashAttention
  refused by the FA4 forcing's FP8 gate, FlashInfer next) fails with vLLM's text.
"""

from __future__ import annotations

import pytest

from kselect.selector.api import compose, resolve
from kselect.selector.base.errors import KSelectError, SelectionError

SEED = ["rules=post_pr52987", "model=gemma4_31b"]


def groups(*extra):
    sel = resolve(compose([*SEED, *extra]))
    return sel, {(g.kind, g.draft): g for g in sel.groups}


def test_fa3_pin_on_sm100_multimodal_runs_triton_and_is_reported_ignored():
    sel, g = groups("platform=sm100", "model.multimodal=true", "attention.flash_attn_version=3")
    assert {(k, x.backend, x.flash_attn_version) for k, x in g.items()} == {
        (("sliding_window", False), "TRITON_ATTN", None), (("full_attention", False), "TRITON_ATTN", None)}
    ignored = [w for w in sel.warnings if w.code == "setting_ignored"]
    assert len(ignored) == 1 and "attention.flash_attn_version=3 is ignored by vLLM" in ignored[0].text
    with pytest.raises(KSelectError, match="strict=true refuses"):
        resolve(compose([*SEED, "platform=sm100", "model.multimodal=true", "attention.flash_attn_version=3",
                         "strict=true"]))


def test_mtp_drafter_selects_as_text_layers_beside_a_multimodal_target():
    _, g = groups("platform=sm100", "model.multimodal=true", "spec_decode=mtp")
    assert {k: x.backend for k, x in g.items()} == {
        ("sliding_window", False): "TRITON_ATTN", ("full_attention", False): "TRITON_ATTN",
        ("sliding_window", True): "FLASHINFER", ("full_attention", True): "FLASHINFER"}


@pytest.mark.parametrize("multimodal,spec", [("false", "none"), ("true", "mtp")])
def test_flashinfer_on_a_sm90_sliding_group_fails_as_in_vllm(multimodal, spec):
    with pytest.raises(SelectionError, match="FlashInfer backend on SM90 currently crashes with sliding-window"):
        groups("platform=sm90", "kv_cache=fp8", f"model.multimodal={multimodal}", f"spec_decode={spec}")


def test_sm90_fp8_multimodal_without_mtp_still_runs_triton():
    _, g = groups("platform=sm90", "kv_cache=fp8", "model.multimodal=true")
    assert {x.backend for x in g.values()} == {"TRITON_ATTN"}
