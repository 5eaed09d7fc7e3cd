"""kernels/reference.py against the naive loop, plus cache writes and FP8 helpers."""

import math
import zlib

import pytest
import torch

from kselect.kernels.cache_ops import fp8_dtype, quantize_query, write_kv
from kselect.kernels.cases import make_case
from kselect.kernels.reference import paged_attention
from kselect.kernels.tolerances import rel_err
from naive_attention import MASKS, MODES, naive_dense_attention, spans_for

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
def build(mode, mask, **kw):
    q_lens, kv_lens = MODES[mode]
    opts = dict(MASKS[mask])
    if opts.pop("mm_spans", False):
        opts["mm_spans"] = spans_for(q_lens, kv_lens)
    opts.update(kw)
    return make_case(q_lens, kv_lens, **opts)


def check(case, tol, q=None, q_descale=None):
    out = case.reference(q=q, q_descale=q_descale)
    ref = naive_dense_attention(
        case.q if q is None else q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k,
        case.block_table, case.softmax_scale, window_left=case.window_left, mm_prefix=case.mm_prefix,
        sinks=case.sinks, q_descale=q_descale, k_descale=case.k_descale, v_descale=case.v_descale,
        q_positions=case.q_positions)
    assert out.shape == ref.shape and out.dtype == case.q.dtype
    err = rel_err(out, ref)
    assert err <= tol, err


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("mask", list(MASKS))
def test_masks_and_modes_fp32(mode, mask):
    # a stable seed per case (hash() of a str is salted per process, so a failure would not reproduce)
    check(build(mode, mask, seed=zlib.crc32(f"{mode}:{mask}".encode()) % 1000), 1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("block_size", [16, 32, 64, 128])
def test_dtypes_and_block_sizes(dtype, tol, block_size):
    check(build("mixed", "all", dtype=dtype, block_size=block_size, hq=6, hkv=2), tol)


@pytest.mark.parametrize("cache_dtype", [E4, E5])
@pytest.mark.parametrize("descale", ["layer", "seq_head"])
@pytest.mark.parametrize("quant_query", [False, True])
def test_fp8_caches(cache_dtype, descale, quant_query):
    case = build("chunked", "window", dtype=torch.bfloat16, cache_dtype=cache_dtype, descale=descale)
    if not quant_query:
        return check(case, 1e-2)
    qs = torch.tensor(0.05) if descale == "layer" else 0.02 + torch.rand(3, 2) * 0.05
    q8 = quantize_query(case.q, qs if qs.numel() == 1 else 0.05, cache_dtype)
    # the reference takes q_descale per (seq, kv head); a scalar is the quant-query norm
    out = case.reference(q=q8, q_descale=qs, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    check(case, 1e-2, q=q8, q_descale=qs)


def test_q_positions_draft():
    case = build("decode", "window")
    # all draft queries share one position (MTP): here position kv_len-3 of each sequence
    case.q_positions = (case.seqused_k.long() - 3).clamp_min(0)
    check(case, 1e-5)


def test_fully_masked_row_is_zero():
    case = make_case([2, 1], [8, 5], window_left=2)
    case.q_positions = torch.tensor([100, 101, 2])  # far right of every key -> nothing visible
    out = case.reference()
    assert torch.isfinite(out).all()
    assert out[:2].abs().max() == 0 and out[2].abs().max() > 0
    case.sinks = torch.ones(case.q.shape[1])
    assert torch.isfinite(case.reference()).all()


def test_non_causal_and_gqa_group_mapping():
    case = make_case([4, 3], [9, 3], hq=8, hkv=2, d=32)
    out = paged_attention(case.q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k,
                          case.block_table, 0.3, causal=False)
    ref = naive_dense_attention(case.q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k,
                                case.block_table, 0.3, causal=False)
    assert rel_err(out, ref) < 1e-5


def test_write_kv_round_trip_model_dtype():
    case = make_case([3], [20], dtype=torch.bfloat16, block_size=16)
    k = torch.randn(5, 2, 64).bfloat16()
    v = torch.randn(5, 2, 64).bfloat16()
    slots = torch.tensor([3, 17, -1, 40, 5])
    write_kv(k, v, case.k_cache, case.v_cache, slots)
    flat_k = case.k_cache.view(-1, 2, 64)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(flat_k[s], k[t]) and torch.equal(case.v_cache.view(-1, 2, 64)[s], v[t])


@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_write_kv_fp8_round_trip(name):
    dt = fp8_dtype(name)
    kc = torch.zeros(4, 16, 2, 32, dtype=dt)
    vc = torch.zeros_like(kc)
    k, v = torch.randn(6, 2, 32) * 3, torch.randn(6, 2, 32)
    k[0, 0, 0] = 1e6  # clamps, never inf
    slots = torch.tensor([0, 5, 16, 33, 63, 20])
    ks, vs = torch.tensor(0.5), torch.tensor(0.25)
    write_kv(k, v, kc, vc, slots, ks, vs)
    got = kc.view(-1, 2, 32)[slots].float() * ks
    assert torch.isfinite(got).all() and got[0, 0, 0] == torch.finfo(dt).max * 0.5
    rel = 0.07 if dt == E4 else 0.14
    assert rel_err(got[1:], k[1:]) < rel
    assert rel_err(vc.view(-1, 2, 32)[slots].float() * vs, v) < rel


def test_fp8_dtype_names():
    assert fp8_dtype("fp8") is E4 and fp8_dtype("fp8_e4m3") is E4 and fp8_dtype("fp8_e5m2") is E5
    with pytest.raises(ValueError, match="bfloat16"):
        fp8_dtype("bfloat16")
    assert quantize_query(torch.full((1, 1, 1), 1e9), torch.tensor(1.0)).float().item() == 448.0
    assert not math.isnan(quantize_query(torch.zeros(1, 1, 1), torch.tensor(2.0)).float().item())


@pytest.mark.parametrize("window_left", [-1, 0, 2, 5])
def test_visibility_is_hf_gemma4_sliding_vision_mask(window_left):
    """kernels/reference.py's mask is HF Gemma-4's sliding-layer vision mask, AND(sliding window,
    OR(causal, blockwise)), built from transformers' own mask functions: spans shorter and longer than
    the window, one touching the sequence start, queries from a chunk start."""
    from transformers.masking_utils import (and_masks, blockwise_overlay, causal_mask_function, or_masks,
                                            sliding_window_overlay)
    from kselect.kernels.reference import visibility_mask

    n, spans = 24, [(0, 2), (5, 7), (9, 20)]
    ids = torch.full((1, n), -1)
    for g, (a, e) in enumerate(spans):
        ids[0, a:e] = g
    fn = or_masks(causal_mask_function, blockwise_overlay(ids))
    if window_left >= 0:
        fn = and_masks(sliding_window_overlay(window_left + 1), fn)
    q = torch.arange(4, n)  # a chunk: queries 4..23 over all 24 keys
    hf = torch.stack([torch.stack([fn(0, 0, qi, torch.tensor(k)) for k in range(n)]) for qi in q])
    ours = visibility_mask(q, n, causal=True, window_left=window_left, spans=torch.tensor(spans))
    assert torch.equal(ours, hf)
