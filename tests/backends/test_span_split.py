"""mm-prefix spans on FlashAttention: the span rows' non-causal second pass (backends/span_split.py),
through the FLASH_ATTN adapters with emulated kernels (the `fake_flash_attn` fixture)."""

import pytest
import torch

from kselect.backends import LayerParams, make_backend
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.backends.span_split import span_pass
from kselect.kernels.cache_ops import quantize_query
from kselect.kernels.cases import make_case
from kselect.kernels.tolerances import rel_err


def test_span_rows_and_sequences():
    # seq 0: 6 queries at positions 10..15 over 16 keys, span [8, 13) -> rows 0..2, keys [0, 13)
    # seq 1: 4 queries at 0..3, span [1, 9) cut by the cache end -> rows 7..9 (positions 1..3), keys [0, 4)
    # seq 2: decode at 30, span [2, 5) lies in the past -> no rows
    case = make_case([6, 4, 1], [16, 4, 31], mm_spans=[[(8, 13)], [(1, 9)], [(2, 5)]])
    sp = span_pass(meta_of(case))
    assert sp.rows.tolist() == [0, 1, 2, 7, 8, 9]
    assert sp.meta.cu_seqlens_q.tolist() == [0, 3, 3 + 3]
    assert sp.meta.seqused_k.tolist() == [13, 4]
    assert sp.batch_index.tolist() == [0, 1]
    assert torch.equal(sp.meta.block_table, case.block_table[[0, 1]])
    assert (sp.meta.max_seqlen_q, sp.meta.max_seqlen_k) == (3, 13)


def test_no_rows_in_spans_means_no_second_pass():
    case = make_case([1, 1], [20, 9], mm_spans=[[(2, 10)], []])
    assert span_pass(meta_of(case)) is None
    assert span_pass(meta_of(make_case([3], [9]))) is None


SPANS = [[(3, 9), (12, 30)], [], [(0, 5)]]  # a span longer than the window, a text-only row, one at the start


@pytest.mark.parametrize("version,head", [(3, 64), (4, 64), (4, 512)])
@pytest.mark.parametrize("window", [-1, 5])
@pytest.mark.parametrize("q_lens,kv_lens", [([30, 7, 12], [30, 7, 12]), ([20, 3, 4], [34, 7, 12])])
def test_adapter_matches_reference_with_spans(fake_flash_attn, version, head, window, q_lens, kv_lens):
    case = make_case(q_lens, kv_lens, d=head, block_size=16, window_left=window, mm_spans=SPANS, sinks=version == 3)
    be = make_backend(make_group("FLASH_ATTN", version, head, "float32", 16, 16))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    assert rel_err(out, case.reference()) < 1e-5
    assert fake_flash_attn == [True, False]  # one causal pass, one span pass
    # the spans really matter here: the causal pass alone is different
    causal = make_case(q_lens, kv_lens, d=head, block_size=16, window_left=window, sinks=version == 3).reference()
    assert rel_err(out, causal) > 1e-2


def test_fp8_quant_query_per_sequence_descales(fake_flash_attn):
    """FA3's all-FP8 path with [B, Hkv] descales: the span pass takes its sequences' rows of them."""
    case = make_case([9, 6], [9, 14], d=64, dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn,
                     descale="seq_head", mm_spans=[[], [(9, 13)]])
    qs = torch.tensor(0.05)
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "fp8_e4m3", 16, 16, "q_k_v"))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case, qs))
    ref = case.reference(q=quantize_query(case.q, qs), q_descale=qs, out_dtype=torch.float32)
    assert rel_err(out, ref) < 1e-2


def test_kernel_blocks_smaller_than_kv_blocks(fake_flash_attn):
    case = make_case([12, 5], [40, 5], d=64, block_size=32, mm_spans=[[(30, 38)], [(1, 4)]])
    be = make_backend(make_group("FLASH_ATTN", 4, 64, "float32", 16, 32))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), LayerParams(case.softmax_scale))
    assert rel_err(out, case.reference()) < 1e-5
