"""The selector marks each claim a selection relies on from measured conformance data."""

from __future__ import annotations

import pytest

from kselect.selector.measure.claims import declared_claims
from kselect.selector.api import compose, resolve

@pytest.fixture
def sel():
    """These rows test the seed story's rules (vLLM main after #52987) and its overlays."""
    return lambda *o, evidence=None: resolve(compose(["rules=post_pr52987", *o]), evidence)


@pytest.fixture
def h200_data(fake_conformance):
    return fake_conformance(
        "nvidia_h200",
        "  'FLASH_ATTN_v4:fp8:d256:window': {status: refuted, rel_err: 1.2, detail: wrong output}\n"
        "  'FLASH_ATTN_v4:fp8:d512:causal': {status: verified, rel_err: 0.0017}\n",
    )


def test_pr48666_sliding_claim_refuted(h200_data, sel):
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "overlay=[pr48666]", evidence=h200_data)
    sw, full = s.group("sliding_window"), s.group("full_attention")
    status = {c.claim: c.status for c in sw.claims}
    assert status["FLASH_ATTN_v4:fp8:d256:window"] == "refuted"
    assert status["FLASH_ATTN_v4:fp8:d256:page64"] == "unverified"
    refuted = [w for w in sw.warnings if w.code == "claims_refuted"]
    assert [(w.gpu, w.group, [c.claim for c in w.claims]) for w in refuted] == [
        ("nvidia_h200", "sliding_window", ["FLASH_ATTN_v4:fp8:d256:window"])
    ]
    assert refuted[0].claims[0].rel_err == 1.2 and refuted[0].claims[0].note == "wrong output"
    assert {c.claim: c.status for c in full.claims}["FLASH_ATTN_v4:fp8:d512:causal"] == "verified"
    assert not any(w.code == "claims_refuted" for w in full.warnings)


def test_no_data_means_unverified(sel):
    s = sel("platform=sm100", "model=gemma4_31b")
    assert all(c.status == "unverified" for g in s.groups for c in g.claims)
    assert all(any(w.code == "claims_unverified" and w.gpu == "sm100" for w in g.warnings) for g in s.groups)


def test_a_claim_never_run_for_a_missing_package_is_unverified(fake_conformance, sel):
    ev = fake_conformance("nvidia_h200", "  'FLASHINFER:fp8:d512:causal': {status: unavailable, detail: 'ImportError: no flashinfer'}\n")
    # (the selection before FlashInfer's SM90 builder check, which refuses its sliding-window layers)
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "rules.flashinfer-sm90_sliding_window_builder.enabled=false",
            evidence=ev)
    assert {c.claim: c.status for c in s.group("full_attention").claims}["FLASHINFER:fp8:d512:causal"] == "unverified"


def test_claim_ids_follow_the_selection(sel):
    s = sel("platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "attention.flash_attn_version=3")
    claims = {c.claim for c in s.group("sliding_window").claims}
    assert claims == {f"FLASH_ATTN_v3:fp8:d256:{f}" for f in ("causal", "page16", "window", "quant_query")}


def test_declared_claims_cover_the_declarations():
    claims = declared_claims(["platform=sm90"])
    assert "FLASH_ATTN_v4:fp8:d512:page64" in claims
    assert "FLASH_ATTN_v3:fp8:d256:quant_query" in claims
    assert "TRITON_ATTN:fp8:d512:mm_prefix" in claims
    assert not any(c.startswith("FLASH_ATTN_v3") and ":d512:" in c for c in claims)
    assert "FLASHINFER:fp8:d512:window" in claims and "FLASHINFER:fp8:d256:page64" in claims
    assert not any(c.startswith("FLASHINFER") and "mm_prefix" in c for c in claims)  # not declared
    assert not any(c.startswith("FLEX_ATTENTION") for c in claims)  # not implemented by kselect
