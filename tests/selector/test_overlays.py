"""The overlays over EVERY cell of the seed matrix (the default matrix under rules=post_pr52987, the base the seed overlays patch): the revert is the exact inverse of
#48666, #48666 changes exactly the SM90 FP8 cells (and the MTP draft scales), and the re-land
#53175 routes multimodal FP8 on SM90 to Triton and keeps FA4 FP8 for head 512 only."""

from __future__ import annotations

import pytest

from kselect.selector.review.matrix import resolve_named

BASE, PR, REVERT, RELAND = (), ("pr48666",), ("pr48666", "pr52987"), ("pr53175",)
FA4_FP8 = ("fp8", "fp8_e4m3")  # the cache dtypes #48666's SM90 path takes (not e5m2)


def _strip(sel):
    if sel is None:
        return None
    d = sel.model_dump()
    d["environment"].pop("overlays")
    return d


def _targets(r):
    return [g for g in r.selection.groups if not g.draft]


def test_revert_equals_base_in_every_cell():
    base, rev = resolve_named("seed", BASE), resolve_named("seed", REVERT)
    assert len(base) == len(rev) > 5000
    bad = [b.cell.id for b, r in zip(base, rev) if _strip(b.selection) != _strip(r.selection) or b.error != r.error]
    assert bad == []


def _sm90_fa4_cell(c) -> bool:
    return c.platform == "sm90" and c.kv_cache in FA4_FP8 and c.pin in ("auto", "fa3")


def test_pr48666_changes_exactly_the_expected_cells():
    base, pr = resolve_named("seed", BASE), resolve_named("seed", PR)
    for b, p in zip(base, pr):
        c = b.cell
        if b.selection is None or p.selection is None:
            # the FA3-pinned multimodal SM90 FP8 cells break (FA4's [64] kernel block vs the FA3 group); unpinned ones
            # FlashInfer failed on before (a text-only target or an MTP drafter: its SM90 builder refuses sliding-window
            # layers) run FA4
            if b.error != p.error:
                fa3_breaks = c.pin == "fa3" and c.multimodal
                fa4_runs = (c.pin == "auto" and (not c.multimodal or c.spec_decode == "mtp") and p.selection is not None
                            and "FlashInfer backend on SM90 currently crashes" in b.error)
                assert _sm90_fa4_cell(c) and (fa3_breaks or fa4_runs), c.id
            continue
        # MTP: draft layers copy the target's K/V scales on every FP8 cell
        for gb, gp in zip(b.selection.groups, p.selection.groups):
            if gb.draft and gb.kv_cache_dtype.startswith("fp8"):
                assert (gb.kv_scales, gp.kv_scales) == ("unit", "copied_from_target"), c.id
        tb = [g.model_dump(exclude={"kv_scales", "trace", "reasons", "rejected", "warnings", "claims"}) for g in _targets(b)]
        tp = [g.model_dump(exclude={"kv_scales", "trace", "reasons", "rejected", "warnings", "claims"}) for g in _targets(p)]
        changed = tb != tp or b.selection.block_size != p.selection.block_size
        assert changed == (_sm90_fa4_cell(c)), c.id
        if not changed:
            continue
        fa4 = [g for g in _targets(p) if g.backend == "FLASH_ATTN" and g.flash_attn_version == 4]
        assert fa4, c.id
        if c.pin == "auto":
            assert fa4 == _targets(p), c.id  # every layer group on FA4
        else:
            assert [g.head_size for g in fa4] == [512], c.id  # FA3 pin: head 512 upgrades to FA4
        assert p.selection.block_size == 64
        for g in fa4:
            assert (g.kernel_block_size, g.quant_query, g.descale) == (64, False, "kv_dequant"), c.id
            assert g.kv_block_size % 64 == 0


def test_pr48666_moves_multimodal_fp8_sm90_from_triton_to_fa4():
    """The cause of the revert: Gemma-4 multimodal with an FP8 cache on SM90 used TRITON_ATTN;
    #48666 upgraded it to FA4, whose FP8-KV kernel lacks the bidirectional mm-prefix mask."""
    base, pr = resolve_named("seed", BASE), resolve_named("seed", PR)
    cells = [(b, p) for b, p in zip(base, pr) if b.cell.platform == "sm90" and b.cell.kv_cache in FA4_FP8
             and b.cell.multimodal and b.cell.pin == "auto"]  # fmt: skip
    assert len(cells) == 64
    # with MTP the base fails: the text-only drafter takes FlashInfer (vLLM #48848), whose SM90 builder refuses it
    mtp = [(b, p) for b, p in cells if b.cell.spec_decode == "mtp"]
    assert len(mtp) == 32 and all(b.selection is None and "FlashInfer backend on SM90" in b.error for b, _ in mtp)
    assert all({(g.backend, g.flash_attn_version) for g in p.selection.groups} == {("FLASH_ATTN", 4)} for _, p in mtp)
    for b, p in [x for x in cells if x[0].cell.spec_decode == "none"]:
        assert {g.backend for g in _targets(b)} == {"TRITON_ATTN"}
        assert {(g.backend, g.flash_attn_version, g.mm_prefix) for g in _targets(p)} == {("FLASH_ATTN", 4, True)}


def test_pr53175_routes_multimodal_to_triton_and_keeps_fa4_for_head_512_only():
    for r in resolve_named("seed", RELAND):
        c = r.cell
        if r.selection is None or c.platform != "sm90" or c.kv_cache not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            continue
        for g in r.selection.groups:
            if g.backend == "FLASH_ATTN" and g.flash_attn_version == 4:
                assert g.head_size == 512, c.id
                assert (g.kernel_block_size, g.quant_query, g.descale) == (64, False, "kv_dequant"), c.id
        if c.multimodal and c.pin in ("auto", "fa3") and c.kv_cache in FA4_FP8:
            assert {g.backend for g in _targets(r)} == {"TRITON_ATTN"}, c.id
    # and the head-512 FA4 path is taken somewhere (text-only SM90 FP8 with FA4 forcing)
    assert any(
        g.backend == "FLASH_ATTN" and g.flash_attn_version == 4 and g.head_size == 512 and g.kv_cache_dtype == "fp8_e4m3"
        for r in resolve_named("seed", RELAND) if r.selection for g in r.selection.groups
    )  # fmt: skip


@pytest.mark.parametrize("overlays", [PR, RELAND])
def test_overlays_leave_other_platforms_alone(overlays):
    """Outside SM90 only the MTP draft scales may change."""
    base, ov = resolve_named("seed", BASE), resolve_named("seed", overlays)
    for b, o in zip(base, ov):
        if b.cell.platform == "sm90":
            continue
        assert b.error == o.error, b.cell.id
        if b.selection is None:
            continue
        strip = lambda s: [g.model_dump(exclude={"kv_scales", "trace", "reasons", "rejected", "warnings", "claims"}) for g in s.groups]  # noqa: E731
        assert strip(b.selection) == strip(o.selection), b.cell.id
