"""rules=vllm_0_33_0 against vLLM 0.33.0's own code, one test per behaviour that
differs from the seed's rules. Each asserts the fields and the rule id responsible. The figures
come from reading 0.33.0's sources (conf/rules/vllm_0_33_0.yaml names the files) and agree with
the oracle (`kselect oracle`, kselect/oracle/)."""

from __future__ import annotations

import pytest

from kselect.selector.api import compose
from kselect.selector.base.errors import KSelectError, SelectionError
from kselect.selector.export.formats import render
from kselect.selector.api import resolve


def with_rules(o):
    """This file is about vLLM 0.33.0: rules=vllm_0_33_0 unless a test names other rules."""
    return list(o) if any(x.startswith("rules=") for x in o) else ["rules=vllm_0_33_0", *o]


def sel(*o):
    return resolve(compose(with_rules(o)))


def fields(s):
    return [(g.kind, g.backend, g.flash_attn_version, g.kernel_block_size, g.kv_block_size, g.quant_query)
            for g in s.groups if not g.draft]


def test_rules_vllm_0_33_0_names_itself():
    assert sel("platform=sm90", "model=gemma4_31b").environment["rules"] == "vllm_0_33_0"


def test_sm90_fp8_per_layer_fa3_fa4_and_page_unification():
    """FA3 with a quantized query at head 256; FA4 FP8-KV (64-token kernel blocks, keyed on the model head
    512) at head 512; one cache block 64, the full group's page grows to 128 tokens."""
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8")
    assert "gemma4-per_layer_fa_sm90_fp8" in s.trace and s.block_size == 64
    assert fields(s) == [("sliding_window", "FLASH_ATTN", 3, 64, 64, True), ("full_attention", "FLASH_ATTN", 4, 64, 128, False)]
    assert "fa-sm90_fa4_fp8_kernel_block_64" in s.group("full_attention").trace
    assert s.group("full_attention").descale == "kv_dequant"
    e4b = sel("platform=sm90", "model=gemma4_e4b", "kv_cache=fp8")
    assert fields(e4b) == [("sliding_window", "FLASH_ATTN", 3, 128, 128, True), ("full_attention", "FLASH_ATTN", 4, 64, 64, False)]


def test_sm90_fp8_fa4_pin_sends_head_256_to_flashinfer():
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "attention.flash_attn_version=4")
    assert s.group("sliding_window").backend == "FLASHINFER"
    assert any(r.rule == "fa-fp8_kv_combination" for r in s.group("sliding_window").rejected["FLASH_ATTN"])
    assert s.block_size == 64 and "builtin.common_block_over_backends" in s.trace  # FLASHINFER and FA's [64]


def test_flash_attn_pinned_with_fp8_on_sm90_is_accepted():
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "attention.backend=FLASH_ATTN")
    assert [g.flash_attn_version for g in s.groups] == [3, 4]


@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_sm90_vision_mode_uses_the_triton_flash_attn_composite(kv):
    s = sel("platform=sm90", "model=gemma4_31b", f"kv_cache={kv}", "model.multimodal=true")
    assert {g.backend for g in s.groups} == {"TRITON_FLASH_ATTN"}
    assert all(g.trace[0] == "priority-cuda_sm90_mm_prefix" for g in s.groups)
    if kv == "fp8":  # FA3 + quantized q (both children) at 256; FA4 dequant, q unquantized, at 512
        assert fields(s) == [("sliding_window", "TRITON_FLASH_ATTN", 3, 64, 64, True),
                             ("full_attention", "TRITON_FLASH_ATTN", 4, 64, 128, False)]
    else:
        assert [g.flash_attn_version for g in s.groups] == [4, 4] and s.block_size == 16


def test_sm90_fp8_flash_attn_with_mm_prefix_requires_triton():
    with pytest.raises(SelectionError) as e:
        sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "model.multimodal=true", "attention.backend=FLASH_ATTN")
    assert "SM90 FP8 KV with mm_prefix requires Triton" in " ".join(r.text for r in e.value.rejected["FLASH_ATTN"])


def test_sm100_vision_mode_uses_triton_flashinfer_with_64_token_kernel_blocks():
    s = sel("platform=sm100", "model=gemma4_31b", "kv_cache=fp8", "model.multimodal=true")
    assert fields(s) == [("sliding_window", "TRITON_FLASHINFER", None, 64, 64, True),
                         ("full_attention", "TRITON_FLASHINFER", None, 64, 128, True)]


def test_sm100_fa4_head_256_with_128_token_pages_head_512_falls_back_to_fa2():
    s = sel("platform=sm100", "model=gemma4_31b", "attention.backend=FLASH_ATTN")
    assert fields(s) == [("sliding_window", "FLASH_ATTN", 4, 128, 128, False), ("full_attention", "FLASH_ATTN", 2, 256, 256, False)]
    assert "fa-sm10x_fa4_hd256_kernel_block_128" in s.group("sliding_window").trace
    # the head-256 kernel takes no FP8 cache and no mm-prefix: FA2
    fp8 = sel("platform=sm100", "model=gemma4_31b", "attention.backend=FLASHINFER", "kv_cache=fp8")
    assert {g.backend for g in fp8.groups} == {"FLASHINFER"}


@pytest.mark.parametrize("platform", ["sm80", "sm89", "sm120"])
def test_no_fa4_forces_triton(platform):
    s = sel(f"platform={platform}", "model=gemma4_e4b")
    assert s.trace[0] == "gemma4-force_triton_without_fa4" and {g.backend for g in s.groups} == {"TRITON_ATTN"}


@pytest.mark.parametrize("rules", ["vllm_0_33_0", "post_pr52987"])
def test_sm80_fp8_on_triton_fails_as_vllm_does_at_layer_init(rules):
    with pytest.raises(SelectionError, match="fails after selecting TRITON_ATTN") as e:
        sel(f"rules={rules}", "platform=sm80", "model=gemma4_31b", "kv_cache=fp8")
    (r,) = e.value.rejected["TRITON_ATTN"]
    assert r.rule == "triton-fp8_needs_sm89" and "native FP8 (fp8e4nv) requires SM89+" in r.text
    assert e.value.failure.code == "init_failure"
    assert {g.backend for g in sel(f"rules={rules}", "platform=sm89", "model=gemma4_31b", "kv_cache=fp8").groups} == {"TRITON_ATTN"}


def test_float_kv_dtype_must_match_the_model():
    with pytest.raises(SelectionError, match="incompatible"):
        sel("platform=sm90", "model=gemma4_31b", "kv_cache=float16")


def test_mtp_drafts_copy_the_target_scales():
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "kv_cache.scales=calibrated", "spec_decode=mtp")
    assert {g.kv_scales for g in s.groups if g.draft} == {"copied_from_target"}


def test_an_overlay_on_the_wrong_base_is_a_config_error():
    with pytest.raises(KSelectError, match="overlay=pr48666 was written for rules=post_pr52987"):
        compose(["overlay=[pr48666]"])
    assert compose(["rules=post_pr52987", "overlay=[pr48666]"]).ruleset.name == "post_pr52987"


# ---------------------------------------------------------------- output=vllm


def vllm(*o):
    cfg = compose(with_rules(o))
    return render(resolve(cfg), "vllm", cfg=cfg)


def test_export_emits_only_what_reproduces_the_selection():
    out = vllm("platform=sm90", "model=gemma4_31b", "kv_cache=fp8")
    assert "--block-size" not in out and "--attention-config" not in out  # vLLM's own choice
    assert "--block-size 16" in vllm("platform=sm90", "model=gemma4_31b", "kv_cache.block_size=16")
    # an FA3 choice is exported (else Gemma4Config forces FA4); vLLM upgrades head 512 per layer
    assert '"flash_attn_version":3' in vllm("platform=sm90", "model=gemma4_31b", "attention.flash_attn_version=3")
    # the seed's base runs TRITON_ATTN for a multimodal FP8 model on SM90: vLLM 0.33.0 (its composite first) needs it
    # pinned
    assert '{"backend":"TRITON_ATTN"}' in vllm("rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8",
                                               "model.multimodal=true")


def test_export_mtp_names_the_drafter_and_its_backend():
    out = vllm("platform=sm90", "model=gemma4_e4b", "spec_decode=mtp")
    assert '"method":"mtp","model":"google/gemma-4-E4B-it-assistant"' in out
    # the Gemma-4 speculator ignores speculative_config.attention_backend: no such argument, a comment
    assert "attention_backend" not in out
    assert "# MTP draft layers (selected by vLLM from the arguments above): draft:sliding_window FLASH_ATTN FA4" in out


def test_mtp_drafts_in_vision_mode_select_as_text_layers():
    """SM90, FP8, vision mode: the target runs Triton (FA refuses FP8 with mm-prefix); the draft
    layers select without the mm-prefix and run FLASHINFER (FA's FP8 gate refuses e5m2)."""
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8_e5m2", "model.multimodal=true", "spec_decode=mtp")
    assert "mtp-draft_layers_select_as_text_layers" in s.trace
    drafts = [g for g in s.groups if g.draft]
    assert [(g.backend, g.quant_query) for g in drafts] == [("FLASHINFER", False)] * 2
    assert {g.backend for g in s.groups if not g.draft} == {"TRITON_ATTN"}
    assert all("builtin.draft_selects_as_text_layer" in g.trace for g in drafts)


def test_a_draft_sharing_a_split_kv_group_names_its_kernel_block():
    """E2B, FA4 pinned: the draft's FLASHINFER takes no 128-token kernel block, so the shared
    KV-cache group runs 64; vLLM splits the sliding layers into several groups, so only the
    target layers sharing it run 64 and the target group's reasons say so."""
    s = sel("platform=sm90", "model=gemma4_e2b", "kv_cache=fp8", "model.multimodal=true", "spec_decode=mtp",
            "attention.flash_attn_version=4")
    sw, dsw = s.group("sliding_window"), next(g for g in s.groups if g.draft and g.kind == "sliding_window")
    assert (sw.kernel_block_size, dsw.backend, dsw.kernel_block_size, dsw.kv_block_size) == (128, "FLASHINFER", 64, 128)
    assert sw.draft_shared_kernel_block == 64 and any("run kernel block 64" in r for r in sw.reasons)
    out = vllm("platform=sm90", "model=gemma4_e2b", "kv_cache=fp8", "model.multimodal=true", "spec_decode=mtp",
               "attention.flash_attn_version=4")
    assert "# NOTE sliding_window: vLLM runs kernel block 64 (not 128) on the target layers sharing" in out
    # the full kind is one KV-cache group in vLLM: its kernel block is the shared one outright
    assert s.group("full_attention").draft_shared_kernel_block is None


def test_post_pr52987_drafts_select_as_text_layers_too():
    """vLLM 0.28.0's speculator does as 0.33.0's: a multimodal target on TRITON_ATTN, its text-only drafter on
    FlashInfer (SM100, nothing pinned)."""
    s = sel("rules=post_pr52987", "platform=sm100", "model=gemma4_31b", "kv_cache=fp8_e5m2", "model.multimodal=true",
            "spec_decode=mtp")
    drafts = [g for g in s.groups if g.draft]
    assert drafts and all(g.backend == "FLASHINFER" != s.group(g.kind).backend and "builtin.draft_selects_as_text_layer"
                          in g.trace for g in drafts)


@pytest.mark.parametrize("args, needle", [
    (("platform=cpu", "model=gemma4_31b"), "CPU_ATTN"),
    (("rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "overlay=[pr48666]"),
     "cannot express this selection"),
    (("platform=sm90", "model=gemma4_tiny", "spec_decode=mtp"), "model.drafter.checkpoint"),
])
def test_export_refuses_in_one_line(args, needle):
    with pytest.raises(KSelectError) as e:
        vllm(*args)
    assert needle in str(e.value) and "\n" not in str(e.value)
