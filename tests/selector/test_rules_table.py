"""One test per rule of vLLM's selection as conf/rules/post_pr52987.yaml holds it (PRE/POST, and with
vLLM PR #48666 as conf/overlay/pr48666.yaml), on the Gemma-4 presets. Each asserts the backend/version/blocks and that
the responsible rule id is in the trace or the rejection reasons."""

from __future__ import annotations

import pytest

from kselect.selector.base.errors import SelectionError

SM90_31B = ("platform=sm90", "model=gemma4_31b")
PR = "overlay=[pr48666]"
# FlashInfer's SM90 metadata builder refuses sliding-window layers (flashinfer-sm90_sliding_window_builder, vLLM 0.28.0):
# rows about what is selected before that check disable it (tests/selector/test_seed_era.py asserts the failure)
NO_FI_SM90_SWA = "rules.flashinfer-sm90_sliding_window_builder.enabled=false"
from kselect.selector.api import select

@pytest.fixture
def sel():
    """These rows test the seed story's rules (vLLM main after #52987) and its overlays."""
    return lambda *o: select(["rules=post_pr52987", *o])


def rules(g, name: str) -> set[str]:
    """The ids of the reject rules that refused `name` for group g."""
    return {r.rule for r in g.rejected[name] if r.rule}


def test_r1_explicit_backend_validated_alone_no_fallback(sel):
    s = sel(*SM90_31B, "attention.backend=TRITON_ATTN")
    assert {g.backend for g in s.groups} == {"TRITON_ATTN"}
    assert all(g.rejected == {} for g in s.groups)  # nothing else was tried
    with pytest.raises(SelectionError, match="Selected backend FLASHINFER .* No fallback") as e:
        sel(*SM90_31B, "attention.backend=FLASHINFER", "model.multimodal=true")
    assert "partial multimodal token full attention not supported" in str(e.value)


def test_r1_backend_per_kind(sel):
    s = sel(*SM90_31B, "+attention.backend_per_kind.full_attention=TRITON_ATTN")
    assert s.group("full_attention").backend == "TRITON_ATTN"
    assert s.group("full_attention").trace[0] == "builtin.pin:TRITON_ATTN"
    assert s.group("sliding_window").backend == "FLASH_ATTN"


def test_r2_sm100_prefers_flashinfer(sel):
    s = sel("platform=sm100", "model=gemma4_31b")
    assert {g.backend for g in s.groups} == {"FLASHINFER"}
    assert all(g.trace[0] == "priority-cuda_sm10x" for g in s.groups)


def test_r3_sm90_prefers_flash_attn(sel):
    s = sel(*SM90_31B)
    assert all(g.backend == "FLASH_ATTN" and g.trace[0] == "priority-cuda" for g in s.groups)


def test_r4_no_valid_backend_lists_every_reason(sel):
    with pytest.raises(SelectionError, match="No valid attention backend") as e:
        sel("platform=sm90", "model=gemma4_31b", "attention.flash_attn_version=3", "kv_cache=fp8",
            "platform.packages.flashinfer=false", "platform.packages.triton=false", "model.dtype=float32")
    assert set(e.value.rejected) == {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"}
    assert ("dtype", "cap.FLASH_ATTN.dtypes") in {(r.code, r.source) for r in e.value.rejected["FLASH_ATTN"]}
    assert e.value.failure.code == "no_valid_backend"


def test_r5_gemma4_mixed_heads_force_fa4(sel):
    s = sel(*SM90_31B)
    assert "gemma4-force_fa4_mixed_heads" in s.trace
    assert [g.flash_attn_version for g in s.groups] == [4, 4]
    # a user version pin disables the forcing
    s3 = sel(*SM90_31B, "attention.flash_attn_version=3")
    assert "gemma4-force_fa4_mixed_heads" not in s3.trace
    assert s3.group("sliding_window").flash_attn_version == 3


@pytest.mark.parametrize("platform", ["sm80", "sm120"])
def test_r6_no_fa4_forces_triton(sel, platform):
    s = sel(f"platform={platform}", "model=gemma4_e4b")
    assert s.trace == ("gemma4-force_triton_without_fa4",)
    assert {g.backend for g in s.groups} == {"TRITON_ATTN"}
    s2 = sel("platform=sm90", "platform.packages.fa4=false", "model=gemma4_e4b")
    assert {g.backend for g in s2.groups} == {"TRITON_ATTN"}


def test_r7_default_versions(sel):
    # sm90 with FA3 and no forcing (pinned FLASH_ATTN leaves the version free only if pinned)
    s = sel(*SM90_31B, "attention.flash_attn_version=3", "attention.backend=FLASH_ATTN",
            "+attention.backend_per_kind.full_attention=TRITON_ATTN")
    assert s.group("sliding_window").flash_attn_version == 3
    assert "fa-version-config" in s.group("sliding_window").trace


def test_r8_sm90_head_over_256_upgrades_to_fa4(sel):
    s = sel(*SM90_31B, "attention.flash_attn_version=3")
    full = s.group("full_attention")
    # version 3 -> 4 for head 512, then FP8-free bf16 FA4 is valid
    assert full.backend == "FLASH_ATTN" and full.flash_attn_version == 4
    assert "fa-version-sm90_large_head_fa4" in full.trace


def test_r9_sm100_large_heads_drop_to_fa2(sel):
    # multimodal on SM100: FlashInfer has no mm_prefix; FA4 drops to FA2 for heads > 128 -> mm reason -> Triton
    s = sel("platform=sm100", "model=gemma4_31b", "model.multimodal=true")
    for g in s.groups:
        assert g.backend == "TRITON_ATTN"
        assert "fa-mm_prefix_version" in rules(g, "FLASH_ATTN")


def test_r10_head_size_over_256_needs_fa4(sel):
    s = sel(*SM90_31B, "platform.packages.fa4=false", "attention.backend=FLASH_ATTN",
            "+attention.backend_per_kind.full_attention=TRITON_ATTN")
    assert s.group("sliding_window").backend == "FLASH_ATTN"
    with pytest.raises(SelectionError, match="head_size not supported"):
        sel(*SM90_31B, "platform.packages.fa4=false", "attention.backend=FLASH_ATTN")


def test_r11_fp8_kv_pre_and_pr(sel):
    base = sel(*SM90_31B, "kv_cache=fp8", NO_FI_SM90_SWA)
    for g in base.groups:
        assert g.backend == "FLASHINFER"
        assert {"fa-kv_dtype_version_gate", "fa-fp8_kv_combination"} <= rules(g, "FLASH_ATTN")
    pr = sel(*SM90_31B, "kv_cache=fp8", PR)
    assert {(g.backend, g.flash_attn_version) for g in pr.groups} == {("FLASH_ATTN", 4)}


def test_r11_e5m2_never_flash_attn(sel):
    s = sel(*SM90_31B, "kv_cache=fp8_e5m2", PR, NO_FI_SM90_SWA)
    for g in s.groups:
        assert ("kv_cache_dtype", "kv_cache_dtypes") in {(r.code, r.capability) for r in g.rejected["FLASH_ATTN"]}


def test_r12_multimodal_fp8_pre_triton_pr_fa4(sel):
    """The cause of the revert: multimodal FP8 on SM90 went from TRITON_ATTN to FA4."""
    pre = sel(*SM90_31B, "kv_cache=fp8", "model.multimodal=true")
    for g in pre.groups:
        assert g.backend == "TRITON_ATTN"
        assert "mm_prefix" in {r.code for r in g.rejected["FLASHINFER"]}
    pr = sel(*SM90_31B, "kv_cache=fp8", "model.multimodal=true", PR)
    assert {(g.backend, g.flash_attn_version) for g in pr.groups} == {("FLASH_ATTN", 4)}
    assert all(g.mm_prefix for g in pr.groups)


def test_r13_r15_r16_pr_blocks_31b(sel):
    """Block-size negotiation (vLLM's unify_kv_cache_spec_page_size, select_common_block_size): PR, SM90, FP8, FA4: preferred 64, SWA 64, full 64 -> 128, kernel 64."""
    s = sel(*SM90_31B, "kv_cache=fp8", PR)
    sw, full = s.group("sliding_window"), s.group("full_attention")
    assert s.block_size == 64
    assert (sw.kv_block_size, sw.kernel_block_size) == (64, 64)
    assert (full.kv_block_size, full.kernel_block_size) == (128, 64)
    assert "pr48666-sm90_fa4_fp8_kernel_block_64" in sw.trace
    assert "builtin.page_unify" in full.trace and "builtin.kernel_block_divides_kv_block" in full.trace


def test_pre_blocks_31b_bf16(sel):
    """Section 5, PRE BF16: both start at 16; the full page is half the SWA page, so full -> 32."""
    s = sel(*SM90_31B)
    assert s.block_size == 16
    assert s.group("sliding_window").kv_block_size == 16
    assert s.group("full_attention").kv_block_size == 32
    assert s.group("full_attention").kernel_block_size == 32


def test_r14_preferred_block_xpu(sel):
    s = sel("platform=xpu", "model=gemma4_31b", "attention.backend=FLASH_ATTN",
            "+attention.backend_per_kind.full_attention=TRITON_ATTN")
    assert s.block_size == 64
    assert "fa-preferred_block_xpu" in s.trace


def test_r17_quant_query(sel):
    pre = sel(*SM90_31B, "kv_cache=fp8", "attention.flash_attn_version=3")
    sw = pre.group("sliding_window")
    assert (sw.backend, sw.flash_attn_version, sw.quant_query, sw.descale) == ("FLASH_ATTN", 3, True, "q_k_v")
    pr = sel(*SM90_31B, "kv_cache=fp8", PR)
    assert all(not g.quant_query for g in pr.groups)
    assert all("pr48666-sm90_fa4_fp8_no_quant_query" in g.trace for g in pr.groups)
    bf16 = sel(*SM90_31B)
    assert all(not g.quant_query and g.descale == "none" for g in bf16.groups)
    # FlashInfer takes a quantized query only through its TRT-LLM kernels (SM100)
    fi = sel(*SM90_31B, "kv_cache=fp8", NO_FI_SM90_SWA)
    assert all(g.backend == "FLASHINFER" and not g.quant_query and g.descale == "k_v" for g in fi.groups)
    assert all("flashinfer-quant_query_trtllm_only" in g.trace for g in fi.groups)
    sm100 = sel("platform=sm100", "model=gemma4_31b", "kv_cache=fp8")
    assert all(g.backend == "FLASHINFER" and g.quant_query and g.descale == "q_k_v" for g in sm100.groups)


def test_r18_fa4_descales(sel):
    pr = sel(*SM90_31B, "kv_cache=fp8", PR)
    assert {g.descale for g in pr.groups} == {"kv_dequant"}


def test_r19_user_block_size_excludes_fa_under_pr(sel):
    s = sel(*SM90_31B, "kv_cache=fp8", PR, "kv_cache.block_size=16", NO_FI_SM90_SWA)
    for g in s.groups:
        assert g.backend == "FLASHINFER"
        assert g.rejected["FLASH_ATTN"][0].code == "block_size"
        assert [(w.code, w.backends) for w in g.warnings if w.code == "block_size_precluded"] == [
            ("block_size_precluded", ("FLASH_ATTN",))
        ]


def test_r20_mtp_draft_scales(sel):
    args = (*SM90_31B, "kv_cache=fp8", "kv_cache.scales=calibrated", "spec_decode=mtp", NO_FI_SM90_SWA)
    base = sel(*args)
    drafts = [g for g in base.groups if g.draft]
    assert [g.reads_from for g in drafts] == [(58,), (59,)]
    assert all(g.kv_scales == "unit" for g in drafts)
    assert all(any(w.rule == "mtp-unit_scales_on_calibrated_fp8" for w in g.warnings) for g in drafts)
    pr = sel(*args, PR)
    drafts = [g for g in pr.groups if g.draft]
    assert all(g.kv_scales == "copied_from_target" for g in drafts)
    assert not any(w.rule == "mtp-unit_scales_on_calibrated_fp8" for g in pr.groups for w in g.warnings)
    # the user pin wins over the rules
    pinned = sel(*args, "spec_decode.copy_target_kv_scales=true")
    assert all(g.kv_scales == "copied_from_target" for g in pinned.groups if g.draft)


def test_r20_draft_selects_as_a_text_layer(sel):
    """vLLM #48848: the multimodal FP8 target runs TRITON_ATTN, its text-only drafter FlashInfer."""
    s = sel(*SM90_31B, "kv_cache=fp8", "model.multimodal=true", "spec_decode=mtp", NO_FI_SM90_SWA)
    for d in (g for g in s.groups if g.draft):
        assert (d.backend, s.group(d.kind).backend) == ("FLASHINFER", "TRITON_ATTN")
        assert d.trace[0] == "builtin.draft_selects_as_text_layer"
        assert not d.mm_prefix


def test_r21_pr53175_reland(sel):
    s = sel(*SM90_31B, "kv_cache=fp8", "overlay=[pr53175]", NO_FI_SM90_SWA)
    assert s.group("full_attention").backend == "FLASH_ATTN"
    assert s.group("full_attention").kernel_block_size == 64
    assert s.group("sliding_window").backend == "FLASHINFER"
    assert "pr53175-fa_fp8_kv_combination" in rules(s.group("sliding_window"), "FLASH_ATTN")
    mm = sel(*SM90_31B, "kv_cache=fp8", "model.multimodal=true", "overlay=[pr53175]")
    for g in mm.groups:
        assert g.backend == "TRITON_ATTN"
        assert "pr53175-sm90_fp8_mm_prefix_requires_triton" in rules(g, "FLASH_ATTN")


def test_revert_restores_base_on_examples(sel):
    for extra in [(), ("model.multimodal=true",), ("spec_decode=mtp", "kv_cache.scales=calibrated")]:
        base = sel(*SM90_31B, "kv_cache=fp8", *extra, NO_FI_SM90_SWA)
        rev = sel(*SM90_31B, "kv_cache=fp8", *extra, "overlay=[pr48666,pr52987]", NO_FI_SM90_SWA)
        assert base.groups == rev.groups and base.block_size == rev.block_size


def test_cpu_uses_reference(sel):
    s = sel("platform=cpu")
    assert {g.backend for g in s.groups} == {"TORCH_REFERENCE"}
    assert s.trace == ()  # no Gemma-4 forcing off GPUs


def test_kv_sharing_noted_for_edge_models(sel):
    s = sel("platform=sm90", "model=gemma4_e2b")
    assert any("reuse the cache of layer 13" in r for r in s.group("sliding_window").reasons)
    assert any("reuse the cache of layer 14" in r for r in s.group("full_attention").reasons)


@pytest.mark.parametrize("overlays", [(), ("overlay=[pr48666]",), ("overlay=[pr48666,pr52987]",), ("overlay=[pr53175]",)])
def test_sm80_fp8_fails_at_triton_layer_init_under_every_overlay(sel, overlays):
    """vLLM selects TRITON_ATTN on SM80 with an FP8 cache, then its layer init raises (native FP8
    needs SM89+): the seed's rules refuse it at selection with that text, with or without #48666."""
    with pytest.raises(SelectionError, match="fails after selecting TRITON_ATTN") as e:
        sel("platform=sm80", "model=gemma4_31b", "kv_cache=fp8", *overlays)
    assert e.value.failure.code == "init_failure"
    assert {r.rule for r in e.value.rejected["TRITON_ATTN"]} == {"triton-fp8_needs_sm89"}
    assert {g.backend for g in sel("platform=sm89", "model=gemma4_31b", "kv_cache=fp8", *overlays).groups} == {"TRITON_ATTN"}
