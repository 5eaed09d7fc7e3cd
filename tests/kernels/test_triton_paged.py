"""Our Triton paged kernel against the reference. On CPU it runs in the Triton interpreter
(TRITON_INTERPRET=1, set by conftest.py before the kernel module is imported): tiny shapes only."""

import os

import pytest
import torch

pytest.importorskip("triton")
from kselect.kernels import triton_paged  # noqa: E402
from kselect.kernels.cache_ops import quantize_query  # noqa: E402
from kselect.kernels.cases import make_case  # noqa: E402
from kselect.kernels.tolerances import rel_err  # noqa: E402
from naive_attention import MASKS, MODES, spans_for  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu" and type(triton_paged._attn_fwd).__name__ != "InterpretedFunction":
    pytest.skip("no GPU, and kernels.triton_paged was imported before TRITON_INTERPRET=1 was set "
                f"(TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r})", allow_module_level=True)
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def run(case, q=None, q_descale=None, out_dtype=None, **kw):
    q = case.q if q is None else q
    return triton_paged.paged_attention_triton(
        q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k, case.block_table, case.softmax_scale,
        window_left=case.window_left, mm_prefix=case.mm_prefix, sinks=case.sinks, q_descale=q_descale,
        k_descale=case.k_descale, v_descale=case.v_descale, q_positions=case.q_positions,
        out_dtype=out_dtype or case.q.dtype, **kw)


def build(mode, mask, **kw):
    q_lens, kv_lens = MODES[mode]
    opts = dict(d=32, device=DEV, **MASKS[mask])
    if opts.pop("mm_spans", False):
        opts["mm_spans"] = spans_for(q_lens, kv_lens)
    opts.update(kw)
    return make_case(q_lens, kv_lens, **opts)


def check(case, tol=1e-5, **kw):
    out = run(case, **kw)
    assert out.dtype == case.q.dtype and torch.isfinite(out).all()
    err = rel_err(out, case.reference())
    assert err <= tol, err


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("mask", list(MASKS))
def test_masks_and_modes(mode, mask):
    check(build(mode, mask, seed=7))


@pytest.mark.parametrize("splits", [2, 3, 8])
@pytest.mark.parametrize("mask", ["causal", "window", "all"])
def test_split_kv_decode(splits, mask):
    # 8 splits of a 9-token sequence leaves empty splits: they must merge as nothing
    check(build("decode", mask, seed=splits), num_splits=splits)


def test_split_kv_short_queries():
    check(build("mixed", "all", seed=3), num_splits=3)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("block_size", [16, 64])
def test_dtypes_and_pages(dtype, tol, block_size):
    check(build("mixed", "all", dtype=dtype, block_size=block_size, hq=6, hkv=2), tol)


@pytest.mark.parametrize("cache_dtype", [E4, E5])
@pytest.mark.parametrize("descale", ["layer", "seq_head"])
def test_fp8_kv(cache_dtype, descale):
    check(build("chunked", "window", dtype=torch.bfloat16, cache_dtype=cache_dtype, descale=descale), 1e-2)


@pytest.mark.parametrize("splits", [1, 3])
def test_fp8_quant_query(splits):
    case = build("decode", "sinks", dtype=torch.bfloat16, cache_dtype=E4, descale="seq_head")
    qs = torch.tensor(0.05, device=DEV)
    q8 = quantize_query(case.q, qs)
    out = run(case, q=q8, q_descale=qs, out_dtype=torch.bfloat16, num_splits=splits)
    assert out.dtype == torch.bfloat16
    assert rel_err(out, case.reference(q=q8, q_descale=qs)) < 1e-2


@pytest.mark.parametrize("hq,hkv,d", [(2, 2, 32), (6, 2, 48), (8, 1, 16), (3, 1, 192)])
def test_gqa_groups_and_head_dims(hq, hkv, d):
    check(make_case([4, 1], [11, 20], hq=hq, hkv=hkv, d=d, window_left=8, sinks=True, device=DEV))


def test_q_positions_and_fully_masked_rows():
    case = make_case([3, 1], [12, 6], window_left=2, device=DEV)
    case.q_positions = torch.tensor([11, 50, 60, 5], device=DEV)  # rows 2-3 see nothing
    out = run(case)
    assert torch.isfinite(out).all() and out[1:3].abs().max() == 0
    assert rel_err(out, case.reference()) < 1e-5


def test_backend_adapter_with_kernel_blocks_and_quant_query():
    from kselect.backends import LayerParams, make_backend
    from kselect.backends.fixtures import make_group, meta_of

    case = make_case([3, 1], [40, 70], block_size=64, dtype=torch.bfloat16, cache_dtype=E4, descale="seq_head",
                     window_left=30, sinks=True, device=DEV)
    qs = torch.tensor(0.05, device=DEV)
    layer = LayerParams(case.softmax_scale, window_left=30, sinks=case.sinks, k_scale=case.k_descale,
                        v_scale=case.v_descale, q_scale=qs)
    be = make_backend(make_group("TRITON_ATTN", kv="fp8_e4m3", kernel_block=16, kv_block=64, descale="q_k_v",
                                 build="kselect"))  # our kernel: TRITON_ATTN+kselect (per-sequence descales)
    assert be.name == "TRITON_ATTN" and be.supports_cuda_graphs()
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer)
    assert rel_err(out, case.reference(q=quantize_query(case.q, qs), q_descale=qs)) < 1e-2


def test_pick_config_per_dtype():
    bf = triton_paged.pick_config(512, 8, 1, True, False)
    f8 = triton_paged.pick_config(512, 8, 1, True, False, kv_fp8=True)
    assert len(bf) == len(f8) == 5 and not bf[4] and f8[4]  # fp8 widens with the inline-asm packed cvt
    assert triton_paged.pick_config(256, 2, 1, True, True, kv_fp8=True)[4] is False  # interpreter: no asm


@pytest.mark.skipif(DEV != "cuda", reason="the inline-asm e4m3 widening runs on the GPU only")
@pytest.mark.parametrize("asm", [False, True])
@pytest.mark.parametrize("d,window", [(256, 40), (512, -1)])
def test_fp8_kv_decode_widen_paths(asm, d, window):
    case = make_case([1, 1, 1], [300, 77, 129], hq=8, hkv=2, d=d, window_left=window, dtype=torch.bfloat16,
                     cache_dtype=E4, descale="seq_head", device=DEV)
    cfg = triton_paged.pick_config(d, 4, 1, True, False, kv_fp8=True)[:4] + (asm,)
    for splits in (1, 3):
        assert rel_err(run(case, config=cfg, num_splits=splits), case.reference()) < 1e-2


@pytest.mark.parametrize("name, programs, span, splits", [
    ("31B sliding B1 x 544: 16 kv heads", 16, 544, 9), ("31B full: 4 kv heads", 4, 544, 17),
    ("E4B sliding: 2 kv heads, a 512-key window", 2, 512, 16), ("E4B full", 2, 544, 17),
    ("short context: one tile a program at most", 2, 40, 2), ("E4B sliding B4", 8, 512, 16)])
def test_small_batch_decode_splits_are_the_h200_sweeps_best(name, programs, span, splits):
    """At batch <= 4 the split count gives about one program per SM (132 on the H200), each at least one
    32-key tile: the best of bench/results/h200/splits/S at B1 x 544 for each shape (and E4B sliding at B4)."""
    from kselect.kernels.triton_paged import small_decode

    assert small_decode(programs, span, 132) == (32, 2, splits), name


def test_small_launch_up_to_batch_16_only_on_the_cards_that_measured_it(monkeypatch):
    """SMALL_BATCH_BY_CARD: the H100 and the H200 take the small launch up to batch 16 (bench/results/h100/attn_b16/,
    bench/results/h200/b16_rule/), another card or the CPU up to SMALL_BATCH; a switch's SMALL["batch"] wins on any
    card."""
    from kselect.kernels import cards

    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-80GB", 2: "NVIDIA H200"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: names[i])
    cards._device_name.cache_clear()
    try:
        assert triton_paged.small_batch(torch.device("cuda", 0)) == 16
        assert triton_paged.small_batch(torch.device("cuda", 2)) == 16
        assert triton_paged.small_batch(torch.device("cuda", 1)) == triton_paged.SMALL_BATCH == 4
        assert triton_paged.small_batch(torch.device("cpu")) == 4
        with triton_paged.small_launch(batch=8):
            assert triton_paged.small_batch(torch.device("cuda", 0)) == 8
        assert triton_paged.small_batch(torch.device("cuda", 0)) == 16
    finally:
        cards._device_name.cache_clear()


def test_batch_16_rule_two_programs_an_sm_and_32_bit_offsets_above_batch_4_on_the_h100_and_h200(monkeypatch):
    """SMALL_WIDE_BY_CARD: above SMALL_BATCH sequences the H100's and the H200's small launch runs about two programs
    an SM and 32-bit cache offsets (bench/results/h100/b16_rule/, bench/results/h200/b16_rule/); batch 4 and below,
    another card, or a call that is not a small decode keep one program an SM and 64-bit offsets; the switches win
    on any card."""
    from kselect.kernels import cards

    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-80GB", 2: "NVIDIA H200"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: names[i])
    cards._device_name.cache_clear()
    try:
        h100, other, h200 = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cuda", 2)
        rule = triton_paged.wide_rule(h100, True, 16)
        assert rule == dict(per_sm=2, off32=True) and triton_paged.wide_rule(h100, True, 5) == rule
        assert triton_paged.wide_rule(h100, True, 4) == {} and triton_paged.wide_rule(h100, False, 16) == {}
        assert triton_paged.wide_rule(h200, True, 16) == rule and triton_paged.wide_rule(h200, True, 4) == {}
        assert triton_paged.wide_rule(other, True, 16) == {}
        # E4B at batch 16 x 520 keys on 132 SMs: 9 splits with the rule's two programs an SM, 5 with one
        assert triton_paged.small_decode(32, 520, 132, rule["per_sm"]) == (32, 2, 9)
        assert triton_paged.small_decode(32, 520, 132) == (32, 2, 5)
        with triton_paged.small_launch(per_sm=1):  # the switch over the card's rule (gemv_variants b16_off)
            assert triton_paged.small_decode(32, 520, 132, rule["per_sm"]) == (32, 2, 5)
    finally:
        cards._device_name.cache_clear()


def test_small_launch_geometry_at_batch_16_in_the_interpreter():
    """The H100's batch-16 small launch, as far as the interpreter takes it (it never picks the small launch itself):
    16 sequences of unequal length, 32-key tiles and the split count small_decode gives on 132 SMs, against the
    reference, with a window as E4B's sliding layers have."""
    block_n, stages, splits = triton_paged.small_decode(16 * 2, 160, 132)
    assert (block_n, splits) == (32, 5)
    case = make_case([1] * 16, [160 - 5 * i for i in range(16)], hq=8, hkv=2, d=32, device=DEV, seed=4, window_left=96)
    out = run(case, max_seqlen_q=1, max_seqlen_k=160, num_splits=splits, config=(4, block_n, 4, stages))
    assert rel_err(out, case.reference()) <= 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("d, window", [(256, 512), (512, -1)])
def test_small_launch_at_batch_16(d, window):
    """E4B's batch-16 decode at 520 keys (the sliding d256 and full d512 layers) on the small launch, at one and four
    programs an SM: within the decode tolerance of the reference and of pick_config's tiles."""
    case = make_case([1] * 16, [520 - 7 * i for i in range(16)], hq=8, hkv=2, d=d, block_size=16,
                     dtype=torch.bfloat16, device=DEV, seed=3, window_left=window)
    with triton_paged.small_launch(batch=0):
        plain = run(case, max_seqlen_q=1, max_seqlen_k=520)
    for per_sm in (1, 4):
        with triton_paged.small_launch(batch=16, per_sm=per_sm):
            got = run(case, max_seqlen_q=1, max_seqlen_k=520)
        assert rel_err(got, case.reference()) < 1e-2 and rel_err(got, plain) < 1e-2, per_sm


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_the_cards_batch_16_rule_is_the_default_launch():
    """At batch 16 the default launch is the card's SMALL_WIDE_BY_CARD entry (bench/results/h100/b16_rule/): the bits
    of the launch with that entry's switches set, and not those of one program an SM with 64-bit offsets (which
    split the keys another way, so their fp32 sums round differently)."""
    rule = triton_paged.wide_rule(torch.device(DEV), True, 16)
    if not rule:
        pytest.skip("this card has no batch-16 rule")
    case = make_case([1] * 16, [520 - 7 * i for i in range(16)], hq=8, hkv=2, d=256, block_size=16,
                     dtype=torch.bfloat16, device=DEV, seed=5, window_left=511)
    default = run(case, max_seqlen_q=1, max_seqlen_k=520)
    with triton_paged.small_launch(per_sm=rule["per_sm"]), triton_paged.offsets_32(rule["off32"]):
        explicit = run(case, max_seqlen_q=1, max_seqlen_k=520)
    with triton_paged.small_launch(per_sm=1), triton_paged.offsets_32(False):
        before = run(case, max_seqlen_q=1, max_seqlen_k=520)
    assert torch.equal(default, explicit) and not torch.equal(default, before)
    assert rel_err(default, case.reference()) < 1e-2


# each mask, batch kind and split count at least once a switch, not their product (CI time)
COVER = [("decode", "window", 3), ("mixed", "all", 3), ("decode", "causal", 1), ("mixed", "window", 1)]


@pytest.mark.parametrize("mode,mask,splits", COVER)
@pytest.mark.parametrize("how", [triton_paged.REGS, triton_paged.L2])
def test_first_tile_prefetch_gives_the_same_bits(mode, mask, splits, how):
    """The first key tile read before the PDL wait (earlier steps' keys into registers, or the tables alone where its
    lines go to L2, which the interpreter skips) and this step's keys after it: the bits of the plain read, with one
    or several tiles a program and several queries of a sequence (its new keys span tiles)."""
    case = build(mode, mask, seed=11)
    want = run(case, num_splits=splits, prefetch=False)
    assert torch.equal(run(case, num_splits=splits, prefetch=how), want)
    assert rel_err(want, case.reference()) <= 1e-5


@pytest.mark.parametrize("mask,splits,prefetch", [("causal", 3, False), ("window", 1, False),
                                                  ("all", 3, triton_paged.REGS), ("window", 3, triton_paged.REGS)])
def test_lean_start_gives_the_same_bits(mask, splits, prefetch):
    """kernels/triton_paged.py LEAN_START, a decode of one query tile: no early exit, the first tile's block ids read
    before q. The bits of the plain start, with one or several splits, with the first tile's prefetch or without."""
    case = build("decode", mask, seed=17)
    want = run(case, num_splits=splits, prefetch=prefetch)
    assert torch.equal(run(case, num_splits=splits, prefetch=prefetch, lean=True), want)
    assert rel_err(want, case.reference()) <= 1e-5


@pytest.mark.parametrize("splits", [1, 3])
def test_lean_start_with_a_sequence_without_a_query(splits):
    """Without the early exit, the programs of a sequence with no query this step (its q_len 0) run on: every row is
    masked, so they read no key and store nothing, and the other sequences' rows are the plain start's bits."""
    import dataclasses

    full = make_case([1, 1, 1], [40, 24, 33], hq=4, hkv=2, d=32, device=DEV, seed=18, window_left=16)
    keep = torch.tensor([0, 2])  # the middle sequence's query dropped
    case = dataclasses.replace(full, q=full.q[keep].contiguous(),
                               cu_seqlens_q=torch.tensor([0, 1, 1, 2], dtype=torch.int32, device=DEV))
    want = run(case, num_splits=splits, max_seqlen_q=1)
    assert torch.equal(run(case, num_splits=splits, max_seqlen_q=1, lean=True), want)
    assert rel_err(want, full.reference()[keep]) <= 1e-5


@pytest.mark.parametrize("mode,mask,splits", COVER)
def test_32_bit_positions_give_the_same_bits(mode, mask, splits):
    """kernels/triton_paged.py POSITIONS_32: positions in 32 bits, the token index alone widened for addresses. The
    bits of the 64-bit positions, in decode and mixed batches (several query tiles), every mask, one or several
    splits."""
    case = build(mode, mask, seed=19)
    want = run(case, num_splits=splits)
    assert torch.equal(run(case, num_splits=splits, pos32=True), want)
    with triton_paged.positions_32(True):
        assert torch.equal(run(case, num_splits=splits), want)
    assert not triton_paged.POSITIONS_32


@pytest.mark.parametrize("mode,mask,splits", COVER)
def test_32_bit_cache_offsets_give_the_same_bits(mode, mask, splits):
    """kernels/triton_paged.py OFFSETS_32: block ids and K/V row offsets in 32 bits, a position's block and row by
    unsigned division. The bits of the 64-bit offsets, each mask, decode and mixed batches, one or several splits, with
    32-bit positions and the lean start too."""
    case = build(mode, mask, seed=23)
    want = run(case, num_splits=splits)
    assert torch.equal(run(case, num_splits=splits, off32=True), want)
    assert torch.equal(run(case, num_splits=splits, off32=True, pos32=True, lean=True), want)
    with triton_paged.offsets_32(True):
        assert torch.equal(run(case, num_splits=splits), want)
    assert not triton_paged.OFFSETS_32


def test_32_bit_cache_offsets_only_where_every_offset_fits():
    """A cache whose farthest element lies 2**31 or more from its start keeps 64-bit offsets whatever the switch says,
    also a view of fewer elements into a larger tensor (blocks 4 apart) (meta tensors: no memory)."""
    edge = torch.empty(2**31 // 512, 16, 2, 16, device="meta")  # its last offset 2**31 - 1: fits
    past = torch.empty(2**31 // 512 + 1, 16, 2, 16, device="meta")
    assert triton_paged.fits_32(edge, torch.empty(4, 16, 2, 256, device="meta"))
    assert not triton_paged.fits_32(edge, past)
    k = torch.empty(2**17, 4, 16, 2, 256, device="meta")[:, 0]  # [blocks, page, heads, d], blocks 4 apart
    assert k.numel() < 2**31 and not triton_paged.fits_32(k)


def test_lean_start_only_where_switched_on():
    assert not triton_paged.LEAN_START
    with triton_paged.lean_start(True):
        assert triton_paged.LEAN_START
    assert not triton_paged.LEAN_START


def test_prefetch_only_where_switched_on_for_a_small_decode_with_pdl():
    """PREFETCH_KV (off by default) takes effect only in a small-batch decode launched with PDL, not with PDL's early
    release (which gives up the ordering it relies on)."""
    wants, pdl = triton_paged.wants_prefetch, triton_paged.pdl
    on = {"PDL": True, "launch_pdl": True}
    assert not wants(True, on)
    for how in (True, triton_paged.REGS, triton_paged.L2):
        with triton_paged.prefetch_kv(how):
            assert wants(True, on) == (triton_paged.REGS if how is True else how) and not wants(False, on)
            assert not wants(True, {"PDL": pdl.EARLY, "launch_pdl": True}) and not wants(True, {"PDL": False})
        assert not triton_paged.PREFETCH_KV
    with pytest.raises(ValueError, match="prefetch_kv mode must be"):
        triton_paged.prefetch_kv(3).__enter__()


def test_the_cards_rule_for_a_small_decode_under_pdl(monkeypatch):
    """PDL_DECODE_BY_CARD: on the H100 a small decode launched with PDL reads its first tile into L2, starts lean and
    keeps 32-bit positions; not a larger or plain launch, not PDL's early release, not another card. A switch set
    explicitly wins over the rule."""
    tp = triton_paged
    on, plain, early = {"PDL": True, "launch_pdl": True}, {"PDL": False}, {"PDL": tp.pdl.EARLY, "launch_pdl": True}
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(tp, "card_name", lambda d: "NVIDIA H100 80GB HBM3")
    rule = tp.pdl_decode_rule(dev, True, on)
    assert rule == dict(prefetch=tp.L2, lean=True, pos32=True)
    assert tp.pdl_decode_rule(dev, False, on) == {} and tp.pdl_decode_rule(dev, True, plain) == {}
    assert tp.pdl_decode_rule(dev, True, early) == {}
    assert tp.wants_prefetch(True, on, rule) == tp.L2 and tp.wants_prefetch(False, on, rule) == tp.OFF
    with tp.prefetch_kv(False):
        assert tp.wants_prefetch(True, on, rule) == tp.OFF
    with tp.prefetch_kv(tp.REGS):
        assert tp.wants_prefetch(True, on, rule) == tp.REGS
    monkeypatch.setattr(tp, "card_name", lambda d: "NVIDIA H200")
    assert tp.pdl_decode_rule(dev, True, on) == {}


def test_a_calls_switches_follow_the_rule_and_what_overrides_it(monkeypatch):
    """decode_switches, what paged_attention_triton launches with: on the H100 a small decode under PDL gets the rule's
    (L2, lean, 32-bit); a larger or plain call, or another card, none; the module's switches override the rule, and
    the call's arguments override both; the lean start only with one query tile."""
    tp = triton_paged
    on, plain = {"PDL": True, "launch_pdl": True}, {"PDL": False}
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(tp, "card_name", lambda d: "NVIDIA H100 80GB HBM3")
    assert tp.decode_switches(dev, True, on, 1) == (tp.L2, True, True)
    assert tp.decode_switches(dev, True, on, 2) == (tp.L2, False, True)  # two query tiles: no lean start
    assert tp.decode_switches(dev, False, on, 1) == (tp.OFF, False, False)
    assert tp.decode_switches(dev, True, plain, 1) == (tp.OFF, False, False)
    with tp.lean_start(False), tp.positions_32(False), tp.prefetch_kv(tp.OFF):
        assert tp.decode_switches(dev, True, on, 1) == (tp.OFF, False, False)
        assert tp.decode_switches(dev, True, on, 1, tp.REGS, True, True) == (tp.REGS, True, True)
    with tp.positions_32(True):  # set, for every call
        assert tp.decode_switches(dev, False, plain, 1) == (tp.OFF, False, True)
    monkeypatch.setattr(tp, "card_name", lambda d: "NVIDIA H200")
    assert tp.decode_switches(dev, True, on, 1) == (tp.OFF, False, False)


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("switches", [dict(prefetch=True), dict(prefetch=triton_paged.L2), dict(merge_last=True),
                                      dict(prefetch=True, merge_last=True), dict(lean=True),
                                      dict(lean=True, prefetch=triton_paged.L2), dict(pos32=True),
                                      dict(lean=True, prefetch=triton_paged.L2, pos32=True, off32=True)])
def test_prefetch_under_pdl_reads_this_steps_key_after_the_wait(switches):
    """E4B's batch-1 decode shape, launched with PDL as a decode step launches it: a kernel writes this step's key
    and value (the last position), then the attention reads its first tile before the wait (prefetch), merges in its
    last program (merge_last), or both. Over 30 steps, each writing new values at that position, the outputs are the
    bits of plain launches with neither: the step's own key is never read before the kernel that writes it has
    finished, and the last program merges every split's partials."""
    from kselect.kernels import pdl
    from kselect.kernels.kv_write import write_kv_triton

    case = make_case([1], [520], hq=8, hkv=2, d=256, block_size=16, dtype=torch.bfloat16, device=DEV, seed=5)
    pos = 519
    slot = (case.block_table[0, pos // 16].long() * 16 + pos % 16).view(1)
    g = torch.Generator(device=DEV).manual_seed(1)
    news = [(torch.randn(1, 2, 256, device=DEV, generator=g, dtype=torch.bfloat16),
             torch.randn(1, 2, 256, device=DEV, generator=g, dtype=torch.bfloat16)) for _ in range(30)]

    def steps(**kw):
        outs = []
        for k, v in news:
            write_kv_triton(k, v, case.k_cache, case.v_cache, slot)
            outs.append(run(case, max_seqlen_q=1, max_seqlen_k=520, **kw))
        torch.cuda.synchronize()
        return torch.stack(outs)

    want = steps(prefetch=False, merge_last=False)
    with pdl.on():
        got = steps(**switches)
    if switches.get("merge_last"):  # compiled into the attention kernel the merge may sum in another order; a
        assert rel_err(got, want) < 1e-3  # program merging before every split stored would be off by far more
    else:
        assert torch.equal(got, want)
    assert rel_err(want[-1], case.reference()) < 1e-2  # the case's cache now holds the last step's key and value


@pytest.mark.parametrize("mode,splits,mask", [("decode", 3, "causal"), ("decode", 8, "sinks"), ("mixed", 2, "all"),
                                             ("mixed", 5, "sinks")])
def test_merge_in_the_last_program_gives_the_merge_kernels_bits(mode, splits, mask):
    """kernels/split_merge.py: the last split to store its partials merges its group's rows (several queries of a
    sequence, GQA heads, sinks, empty splits) with the merge kernel's code, so the output is its bits; each group's
    counter is back at zero after the call, and a second call (counters reused) gives the same bits again."""
    from kselect.kernels import split_merge

    case = build(mode, mask, seed=splits, hq=4, hkv=2)
    got = run(case, num_splits=splits, merge_last=True)  # first: its workspace cannot hold the merge kernel's partials
    want = run(case, num_splits=splits)
    assert torch.equal(got, want)
    assert not split_merge.tickets(got.device, 1).any()
    assert torch.equal(run(case, num_splits=splits, merge_last=True), want)
    assert rel_err(want, case.reference()) <= 1e-5


def test_merge_in_the_last_program_only_where_switched_on_for_a_small_decode():
    from kselect.kernels import split_merge

    assert not split_merge.MERGE_LAST
    with split_merge.merge_last(True):
        assert split_merge.MERGE_LAST
    assert not split_merge.MERGE_LAST
    with pytest.raises(ValueError, match="at most"):
        split_merge.tickets(torch.device(DEV), split_merge.COUNTERS + 1)


@pytest.mark.skipif(DEV != "cpu", reason="the interpreter runs the PDL wait as a Python call")
@pytest.mark.parametrize("mode,splits", [("decode", 3), ("mixed", 1), ("mixed", 2)])
def test_prefetch_reads_this_steps_keys_after_the_wait(mode, splits, monkeypatch):
    """What the GPU chain test checks, in the interpreter: the kernel before writes this step's keys and values (the
    last q_len positions of each sequence) only when the attention passes its PDL wait, simulated by a wait that
    writes them. The output is the attention over the new values: nothing of this step's was read before the wait."""
    case = build(mode, "all", seed=13)
    q_lens = (case.cu_seqlens_q[1:] - case.cu_seqlens_q[:-1]).tolist()
    page = case.k_cache.shape[1]
    g = torch.Generator().manual_seed(14)
    slots = [(int(case.block_table[s, p // page]), p % page) for s, (ql, kl) in
             enumerate(zip(q_lens, case.seqused_k.tolist())) for p in range(kl - ql, kl)]
    news = [(torch.randn(case.k_cache.shape[2:], generator=g), torch.randn(case.k_cache.shape[2:], generator=g))
            for _ in slots]

    def write():
        for (blk, off), (k, v) in zip(slots, news):
            case.k_cache[blk, off], case.v_cache[blk, off] = k, v

    def wait_then_release(pdl):  # the kernel before completes here
        write()

    monkeypatch.setattr(triton_paged, "wait_then_release", wait_then_release)
    got = run(case, num_splits=splits, prefetch=True)
    write()
    assert rel_err(got, case.reference()) <= 1e-5

