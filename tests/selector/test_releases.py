"""Releases as overlays: rules=vllm_0_34_0 is vllm_0_33_0 plus the overlay conf/overlay/vllm_0_34_0.yaml
(selector/config/releases.py), the default; and the kernel versions a release ships (selector/evidence/kernel_versions.py)."""

from __future__ import annotations

import shutil

import pytest

from kselect.selector.api import CONF_DIR, compose, compose_raw
from kselect.selector.base.errors import KSelectError, SelectionError
from kselect.selector.api import resolve


def sel(*o, conf=CONF_DIR):
    return resolve(compose(list(o), conf))


def fields(s):
    return [(g.kind, g.backend, g.flash_attn_version, g.kernel_block_size, g.kv_block_size) for g in s.groups]


def test_default_rules_are_vllm_0_34_0_built_on_vllm_0_33_0():
    cfg = compose(["platform=sm90", "model=gemma4_31b"])
    assert cfg.ruleset.name == "vllm_0_34_0"
    assert cfg.release.chain == ["vllm_0_32_0", "vllm_0_33_0", "vllm_0_34_0"]
    assert cfg.release.overlays["vllm_0_34_0"] == "vllm_0_33_0"
    assert cfg.overlays == {}  # the release's overlays are the release, not a user's choice
    assert cfg.kernel_versions["flashinfer"] == "0.7.3"


def test_the_release_is_its_base_plus_its_overlay():
    """The same rules and capabilities as composing the base with the overlays by hand (vllm_0_34_0, then the
    non-Gemma models' vllm_0_34_0_models)."""
    release = compose_raw(["rules=vllm_0_34_0"])
    by_hand = compose_raw(["rules=vllm_0_33_0", "overlay=[vllm_0_34_0,vllm_0_34_0_models]"])
    assert release["rules"] == by_hand["rules"] and release["capabilities"] == by_hand["capabilities"]
    assert release["rules"] != compose_raw(["rules=vllm_0_33_0"])["rules"]


def test_hopper_bf16_31b_runs_fa4_with_blocks_64_and_128():
    """vLLM 0.34.0's CacheConfig.DEFAULT_BLOCK_SIZE is 64: the sliding group takes 64, the full group's
    page grows to 128 (0.33.0: 16 and 32)."""
    new = sel("platform=sm90", "model=gemma4_31b")
    assert fields(new) == [("sliding_window", "FLASH_ATTN", 4, 64, 64), ("full_attention", "FLASH_ATTN", 4, 128, 128)]
    assert "block-default_size_64" in new.trace and new.block_size == 64
    old = sel("rules=vllm_0_33_0", "platform=sm90", "model=gemma4_31b")
    assert fields(old) == [("sliding_window", "FLASH_ATTN", 4, 16, 16), ("full_attention", "FLASH_ATTN", 4, 32, 32)]


def test_sm90_d512_fp8_kv_needs_a_user_block_divisible_by_64():
    """FlashAttention's supports_combination in 0.34.0: a user block of 16 (or 96) on SM90 + FP8 refuses
    FLASH_ATTN at head 512 with vLLM's text, beside the kernel-block reason (for Gemma-4 both refuse the
    same blocks); 128 passes; without --block-size nothing is checked."""
    base = ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "+attention.backend_per_kind.full_attention=FLASH_ATTN"]
    for bs in (16, 96):
        with pytest.raises(SelectionError, match="(?s)full_attention group.*SM90 d512 FP8 KV requires a block size divisible by 64 "
                                                 r"\[fa-sm90_d512_fp8_user_block_64\]") as e:
            sel(*base, f"kv_cache.block_size={bs}")
        assert "kernel_block_sizes" in str(e.value)
        with pytest.raises(SelectionError) as old:
            sel("rules=vllm_0_33_0", *base, f"kv_cache.block_size={bs}")
        assert "divisible by 64" not in str(old.value)
    assert sel(*base, "kv_cache.block_size=128").group("full_attention").backend == "FLASH_ATTN"
    assert sel(*base).group("full_attention").backend == "FLASH_ATTN"


def test_a_release_overlay_listed_again_or_on_the_wrong_base_is_refused(tmp_path):
    with pytest.raises(KSelectError, match="vllm_0_34_0 is part of rules=vllm_0_34_0 already"):
        compose(["overlay=[vllm_0_34_0]"])
    with pytest.raises(KSelectError, match="overlay=pr48666 was written for rules=post_pr52987, not rules=vllm_0_34_0"):
        compose(["overlay=[pr48666]"])
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    ov = conf / "overlay" / "vllm_0_34_0.yaml"
    ov.write_text(ov.read_text().replace("  vllm_0_34_0: vllm_0_33_0\n", "  vllm_0_34_0: post_pr52987\n", 1))
    with pytest.raises(KSelectError, match=r"overlay_bases.vllm_0_34_0 is 'post_pr52987', but release vllm_0_34_0 applies it on 'vllm_0_33_0'"):
        compose(["rules=vllm_0_34_0"], conf)


def test_a_manifest_holds_no_rules_of_its_own(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    m = conf / "rules" / "vllm_0_34_0.yaml"
    m.write_text(m.read_text() + "rules:\n  fa-no_version: {enabled: false}\n")
    with pytest.raises(KSelectError, match=r"conf/rules/vllm_0_34_0.yaml: a release manifest holds \['rules'\]"):
        compose(["rules=vllm_0_34_0"], conf)


def test_the_seed_overlays_still_compose_on_their_base():
    cfg = compose(["rules=post_pr52987", "overlay=[pr48666,pr52987,pr53175]"])
    assert cfg.release is None and list(cfg.overlays) == ["pr48666", "pr52987", "pr53175"]


def test_data_from_other_kernel_versions_warns_and_strict_refuses():
    """conf/conformance/nvidia_h200.yaml was measured with vLLM 0.33.0's FA build: a FLASH_ATTN selection
    under 0.34.0 on that GPU says so; under 0.33.0 it does not."""
    new = sel("platform=sm90", "model=gemma4_31b")
    [w] = [w for w in new.warnings if w.code == "kernel_data_version"]
    assert (w.library, w.measured, w.release) == ("vllm_flash_attn", "vllm-0.33.0", "vllm-0.34.0")
    assert "conf/conformance/nvidia_h200.yaml" in w.text
    assert not [w for w in sel("rules=vllm_0_33_0", "platform=sm90", "model=gemma4_31b").warnings if w.code == "kernel_data_version"]
    fi = sel("platform=sm90", "model=gemma4_31b", "attention.backend=FLASHINFER")
    assert {w.library for w in fi.warnings if w.code == "kernel_data_version"} == {"flashinfer"}
    with pytest.raises(SelectionError, match="strict=true refuses .*measured with vllm_flash_attn vllm-0.33.0"):
        sel("platform=sm90", "model=gemma4_31b", "strict=true")


def test_the_chain_is_0_32_then_0_33_then_0_34():
    """vllm_0_32_0 is the root file; each later release is the one before plus its overlay."""
    c32, c33, c34 = (compose([f"rules=vllm_0_3{n}_0"]) for n in (2, 3, 4))
    assert c32.release is None and c32.ruleset.name == "vllm_0_32_0"
    assert c33.release.chain == ["vllm_0_32_0", "vllm_0_33_0"]
    assert c34.release.chain == ["vllm_0_32_0", "vllm_0_33_0", "vllm_0_34_0"]
    assert c34.release.overlays == {"vllm_0_33_0": "vllm_0_32_0", "vllm_0_34_0": "vllm_0_33_0",
                                    "vllm_0_34_0_models": "vllm_0_33_0"}
    assert [c.kernel_versions["flashinfer"] for c in (c32, c33, c34)] == ["0.7.0.post1", "0.7.2.post1", "0.7.3"]
    # 0.32.0's Gemma4Config forces TRITON_ATTN on XPU too; 0.33.0 leaves XPU's choice to the platform
    assert "xpu" in c32.rules["gemma4-force_triton_without_fa4"].when["platform.device"]
    assert "xpu" not in c33.rules["gemma4-force_triton_without_fa4"].when["platform.device"]


def test_the_upgrade_diff_names_each_release_overlays_prs_and_rule_ids(tmp_path):
    """`kselect diff a.rules=vllm_0_33_0 b.rules=vllm_0_34_0` opens with the upgrade steps: per release overlay, the
    upstream PRs its `overlay_prs` declares and the rule ids it writes (selector/config/releases.py)."""
    from kselect.selector.config.releases import render_steps, upgrade_steps

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    ov = conf / "overlay" / "vllm_0_34_0.yaml"
    text = ov.read_text()
    assert "  vllm_0_34_0: []\n" in text
    # 48666 is a stand-in here (a public vLLM PR, the seed story's), not a claim about 0.34.0
    ov.write_text(text.replace("  vllm_0_34_0: []\n", "  vllm_0_34_0: [48666]\n", 1))
    # 0.34.0 is two overlays: the Gemma-4 changes, then the non-Gemma models' (vllm_0_34_0_models)
    step, models_step = upgrade_steps(conf, "vllm_0_33_0", conf, "vllm_0_34_0")
    assert (models_step["overlay"], models_step["prs"]) == ("vllm_0_34_0_models", [])
    assert "priority-cuda_sm10x_mla" in models_step["rules"]
    assert (step["release"], step["overlay"], step["base"], step["prs"]) == ("vllm_0_34_0", "vllm_0_34_0", "vllm_0_33_0", [48666])
    assert "block-default_size_64" in step["rules"] and "fa-sm90_d512_fp8_user_block_64" in step["rules"]
    md = render_steps([step], "markdown")
    assert "upstream PRs: vllm-project/vllm#48666" in md and "`block-default_size_64`" in md
    assert "upstream PRs: vllm-project/vllm#48666" in render_steps([step], "table") and render_steps([step], "json") == ""
    assert compose(["rules=vllm_0_34_0"], conf).release.prs == {"vllm_0_33_0": [], "vllm_0_34_0": [48666],
                                                                "vllm_0_34_0_models": []}
    # the committed overlays name none: the document says so instead of leaving the field out
    real, _ = upgrade_steps(CONF_DIR, "vllm_0_33_0", CONF_DIR, "vllm_0_34_0")
    assert "upstream PRs: none verified by number" in render_steps([real], "markdown")
    # two steps from 0.32.0: each release overlay with its own PRs and rules
    assert [s["overlay"] for s in upgrade_steps(conf, "vllm_0_32_0", conf, "vllm_0_34_0")] == ["vllm_0_33_0", "vllm_0_34_0",
                                                                                                 "vllm_0_34_0_models"]
