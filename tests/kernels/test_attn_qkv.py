"""q/k/v's norms and rope inside the attention kernel (kernels/attn_qkv.py) against the q/k/v kernel followed by the
attention: the caches' bits, and the output up to where the new key is summed (fp32 order; a bf16 output's rounding),
wherever the attention takes the raw q/k/v; the q/k/v kernel first wherever it cannot."""

import dataclasses

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, require_interpreter  # noqa: E402

from kselect.gemma4.model import rope_cos_sin, rope_inv_freq  # noqa: E402
from kselect.kernels import triton_paged  # noqa: E402
from kselect.kernels.attn_qkv import RawQKV  # noqa: E402
from kselect.kernels.cases import make_case  # noqa: E402
from kselect.kernels.qkv_rope import qkv_norm_rope_write  # noqa: E402
from kselect.kernels.tolerances import rel_err  # noqa: E402

require_interpreter(triton_paged._attn_fwd)


def layer(kv_lens, hq=4, hkv=2, d=32, window=-1, k_eq_v=False, shared=False, dtype=torch.bfloat16, seed=0,
          block_size=16):
    """(case, raw q/k/v [T, W], its norm weights, cos, sin, slots) of a decode step: one new token a sequence at
    position kv_len - 1, its cache row holding something else until the step writes it."""
    case = make_case([1] * len(kv_lens), kv_lens, hq=hq, hkv=hkv, d=d, dtype=dtype, device=DEV, seed=seed,
                     window_left=window, block_size=block_size)
    g = torch.Generator().manual_seed(seed + 1)
    width = (hq + (0 if shared else 1 if k_eq_v else 2) * hkv) * d
    qkv = (torch.randn(len(kv_lens), width, generator=g) * 2).to(DEV, dtype)
    qw, kw = ((1 + 0.3 * torch.randn(d, generator=g)).to(DEV, dtype) for _ in range(2))
    pos = case.seqused_k.long() - 1
    cos, sin = rope_cos_sin(pos, rope_inv_freq(d, 10000.0, 1.0), dtype)
    bs = case.k_cache.shape[1]
    slots = case.block_table[torch.arange(len(kv_lens), device=DEV), pos // bs].long() * bs + pos % bs
    return case, qkv, qw, kw, cos, sin, slots


def close(got, want):
    """The output up to the new key's fp32 summation order: 1e-6 in fp32; in bf16 a rounding flip here and there."""
    assert got.dtype == want.dtype and torch.isfinite(got.float()).all()
    assert rel_err(got, want) <= (1e-6 if got.dtype == torch.float32 else 2e-3), rel_err(got, want)


def both(case, qkv, qw, kw, cos, sin, slots, hq, hkv, d, k_eq_v=False, shared=False, max_q=1, **kw_attn):
    """(output, k cache, v cache) of the two kernels and of the attention alone, each on its own copy of the caches."""
    got = []
    for fused in (False, True):
        kc, vc = case.k_cache.clone(), case.v_cache.clone()
        caches = {} if shared else dict(k_cache=kc, v_cache=vc, slot_mapping=slots, k_eq_v=k_eq_v)
        raw = RawQKV(qkv, hq, 0 if shared else hkv, d, qw, None if shared else kw, cos, sin, 1e-6, **caches)
        q = raw if fused else raw.ready()
        out = triton_paged.paged_attention_triton(
            q, kc, vc, case.cu_seqlens_q, case.seqused_k, case.block_table, case.softmax_scale,
            window_left=case.window_left, max_seqlen_q=max_q, max_seqlen_k=int(case.seqused_k.max()), **kw_attn)
        got.append((out, kc, vc))
    return got


@pytest.mark.parametrize("window,splits,k_eq_v,dtype", [(-1, 1, False, torch.bfloat16), (20, 3, True, torch.bfloat16),
                                                       (-1, 3, False, torch.float32), (20, 1, True, torch.float32)])
def test_same_bits_as_the_qkv_kernel_then_attention(window, splits, k_eq_v, dtype):
    """Full and sliding layers, one split or several, K = V or not, bf16 and fp32 (each pair of values at least
    once)."""
    hq, hkv, d = 4, 2, 32
    case, *rest = layer([37, 16, 50], hq, hkv, d, window, k_eq_v, dtype=dtype, seed=5)
    (want, wk, wv), (got, gk, gv) = both(case, *rest, hq, hkv, d, k_eq_v, num_splits=splits)
    close(got, want)
    assert torch.equal(gk, wk) and torch.equal(gv, wv)
    assert not torch.equal(wk, case.k_cache)  # the step wrote its keys


@pytest.mark.parametrize("splits", [1, 3])
def test_the_new_row_comes_from_registers(splits):
    """The program that writes the new row uses its registers' copy, not a read of the cache back (on the GPU that
    read, by other threads without a barrier, may see the old row): with the writes sent to another copy of the
    caches, the output is still the one of the caches written first."""
    hq, hkv, d = 4, 2, 32
    case, qkv, qw, kw, cos, sin, slots = layer([37, 50], hq, hkv, d, 20, seed=6)
    (want, wk, wv), _ = both(case, qkv, qw, kw, cos, sin, slots, hq, hkv, d, num_splits=splits)
    kc, vc = case.k_cache.clone(), case.v_cache.clone()
    raw = RawQKV(qkv, hq, hkv, d, qw, kw, cos, sin, 1e-6, kc, vc, slots)
    got = triton_paged.paged_attention_triton(
        raw, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k, case.block_table, case.softmax_scale,
        window_left=20, max_seqlen_q=1, max_seqlen_k=50, num_splits=splits)
    close(got, want)
    assert torch.equal(kc, wk) and torch.equal(vc, wv)


@pytest.mark.parametrize("splits", [1, 4])
def test_kv_shared_layer_makes_q_only(splits):
    """A KV-shared layer's raw q/k/v holds q alone; the cache (this step's row included) is read as it is."""
    hq, hkv, d = 4, 2, 32
    case, *rest = layer([33, 47], hq, hkv, d, shared=True, seed=7)
    (want, wk, wv), (got, gk, gv) = both(case, *rest, hq, hkv, d, shared=True, num_splits=splits)
    assert torch.equal(got, want)  # q has the kernel's bits, and nothing else changes
    assert torch.equal(gk, case.k_cache) and torch.equal(gv, case.v_cache)


@pytest.mark.parametrize("splits,switches", [(3, dict(lean=True)), (1, dict(pos32=True)),
                                             (3, dict(prefetch=triton_paged.REGS)),
                                             (3, dict(lean=True, pos32=True, prefetch=triton_paged.REGS))])
def test_with_the_decode_switches(splits, switches):
    hq, hkv, d = 8, 2, 32
    case, *rest = layer([70, 41], hq, hkv, d, 24, seed=9)
    (want, wk, wv), (got, gk, gv) = both(case, *rest, hq, hkv, d, num_splits=splits, **switches)
    close(got, want)
    assert torch.equal(gk, wk) and torch.equal(gv, wv)


def test_a_sequence_without_a_query_writes_nothing():
    """In a padded batch a sequence with no token this step (q_len 0) has no new row: nothing is written for it."""
    hq, hkv, d = 4, 2, 32
    case, qkv, qw, kw, cos, sin, slots = layer([30, 22, 41], hq, hkv, d, seed=13)
    keep = torch.tensor([0, 2], device=DEV)
    case = dataclasses.replace(case, cu_seqlens_q=torch.tensor([0, 1, 1, 2], dtype=torch.int32, device=DEV))
    (want, wk, wv), (got, gk, gv) = both(case, qkv[keep], qw, kw, cos[keep], sin[keep], slots[keep], hq, hkv, d,
                                         num_splits=3, lean=True)
    close(got, want)
    assert torch.equal(gk, wk) and torch.equal(gv, wv)


def test_calls_it_cannot_take_run_the_qkv_kernel_first():
    """Two new tokens a sequence (max_q 2) or an FP8 cache: the q/k/v kernel runs first, as `ready()`."""
    hq, hkv, d = 4, 2, 32
    case, qkv, qw, kw, cos, sin, slots = layer([30, 22], hq, hkv, d, seed=15)
    raw = RawQKV(qkv, hq, hkv, d, qw, kw, cos, sin, 1e-6, case.k_cache, case.v_cache, slots)
    assert raw.fits(1, case.k_cache) and not raw.fits(2, case.k_cache)
    assert not raw.fits(1, case.k_cache.to(torch.float8_e4m3fn))
    assert not dataclasses.replace(raw, d=48).fits(1, case.k_cache)
    (want, wk, _), (got, gk, _) = both(case, qkv, qw, kw, cos, sin, slots, hq, hkv, d, max_q=2)
    assert torch.equal(got, want) and torch.equal(gk, wk)  # the same two kernels


def test_ready_is_the_qkv_kernel():
    hq, hkv, d = 4, 2, 32
    case, qkv, qw, kw, cos, sin, slots = layer([30, 22], hq, hkv, d, seed=17)
    kc, vc = case.k_cache.clone(), case.v_cache.clone()
    q = RawQKV(qkv, hq, hkv, d, qw, kw, cos, sin, 1e-6, kc, vc, slots).ready()
    kc2, vc2 = case.k_cache.clone(), case.v_cache.clone()
    assert torch.equal(q, qkv_norm_rope_write(qkv, hq, hkv, d, qw, kw, cos, sin, 1e-6, kc2, vc2, slots))
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("d, window, batch", [(256, 512, 1), (512, -1, 1), (256, 512, 16)])
def test_e4b_decode_shapes_on_the_small_launch(d, window, batch):
    """E4B's decode layers (sliding d256, full d512, K = V) at 520 keys on the GPU's small launch, with the H100's
    batch-1 switches: the caches' bits, the output within a bf16 rounding."""
    hq, hkv = 8, 2
    k_eq_v = d == 512
    case, *rest = layer([520 - 7 * i for i in range(batch)], hq, hkv, d, window, k_eq_v, seed=21)
    for switches in ({}, dict(lean=True, pos32=True, prefetch=triton_paged.L2)):
        (want, wk, wv), (got, gk, gv) = both(case, *rest, hq, hkv, d, k_eq_v, **switches)
        close(got, want)
        assert torch.equal(gk, wk) and torch.equal(gv, wv), switches
