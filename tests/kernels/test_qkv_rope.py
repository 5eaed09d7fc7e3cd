"""kernels/qkv_rope (q/k/v norms + rope + paged cache write) against the model's unfused ops."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, DTYPES, gpu, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.model import RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq  # noqa: E402
from kselect.kernels import cache_ops  # noqa: E402
from kselect.kernels import qkv_rope as K  # noqa: E402

require_interpreter(K._qkv_kernel)


def setup(t, hq, hkv, d, dtype, k_eq_v=False, partial=1.0, cache_dtype=None, blocks=4, bs=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = (hq + (1 if k_eq_v else 2) * hkv) * d
    qkv = (torch.randn(t, width, generator=g) * 2).to(DEV, dtype)
    qn, kn, vn = RMSNorm(d), RMSNorm(d), RMSNorm(d, with_scale=False)
    with torch.no_grad():
        qn.weight.copy_(torch.randn(d, generator=g))
        kn.weight.copy_(torch.randn(d, generator=g))
    qn, kn, vn = (m.to(DEV, dtype) for m in (qn, kn, vn))
    pos = torch.randint(0, 5000, (t,), generator=g).to(DEV)
    cos, sin = rope_cos_sin(pos, rope_inv_freq(d, 10000.0, partial), dtype)
    cdt = cache_dtype or dtype
    kc = torch.randn(blocks, bs, hkv, d, generator=g).to(DEV).to(cdt)
    vc = torch.randn(blocks, bs, hkv, d, generator=g).to(DEV).to(cdt)
    slots = torch.randperm(blocks * bs, generator=g)[:t].to(DEV)
    return qkv, qn, kn, vn, cos, sin, kc, vc, slots


def unfused(qkv, hq, hkv, d, qn, kn, vn, cos, sin, k_eq_v):
    t = qkv.shape[0]
    q = apply_rope(qn(qkv[:, :hq * d].view(t, hq, d)), cos, sin)
    k_raw = qkv[:, hq * d:(hq + hkv) * d].view(t, hkv, d)
    v_raw = k_raw if k_eq_v else qkv[:, (hq + hkv) * d:].view(t, hkv, d)
    return q, apply_rope(kn(k_raw), cos, sin), vn(v_raw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_eq_v,partial", [(False, 1.0), (True, 0.25)])  # sliding / full (K=V, partial rope)
def test_q_and_cache_write(dtype, k_eq_v, partial):
    hq, hkv, d = 4, 2, 32
    qkv, qn, kn, vn, cos, sin, kc, vc, slots = setup(5, hq, hkv, d, dtype, k_eq_v, partial)
    slots[2] = -1  # padding: skipped
    want_kc, want_vc = kc.clone(), vc.clone()
    q_ref, k_ref, v_ref = unfused(qkv, hq, hkv, d, qn, kn, vn, cos, sin, k_eq_v)
    keep = slots >= 0
    want_kc.view(-1, hkv, d)[slots[keep]] = k_ref[keep]
    want_vc.view(-1, hkv, d)[slots[keep]] = v_ref[keep]
    q = K.qkv_norm_rope_write(qkv, hq, hkv, d, qn.weight, kn.weight, cos, sin, qn.eps, kc, vc, slots, k_eq_v=k_eq_v)
    ulp_close(q, q_ref, dtype)
    ulp_close(kc, want_kc, dtype)
    ulp_close(vc, want_vc, dtype)


def test_kv_shared_layer_q_only():
    hq, d = 3, 16
    qkv, qn, kn, vn, cos, sin, *_ = setup(4, hq, 1, d, torch.float32)
    qkv = qkv[:, :hq * d].contiguous()
    q_ref = apply_rope(qn(qkv.view(4, hq, d)), cos, sin)
    ulp_close(K.qkv_norm_rope_write(qkv, hq, 0, d, qn.weight, None, cos, sin, qn.eps), q_ref, torch.float32)


def test_not_power_of_two_head_dim():
    with pytest.raises(ValueError, match="power of two"):
        K.qkv_norm_rope_write(torch.zeros(1, 48), 1, 0, 48, torch.ones(48), None, torch.ones(1, 48),
                              torch.ones(1, 48), 1e-6)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("d,hq,hkv,k_eq_v,partial", [(256, 32, 16, False, 1.0), (512, 32, 4, True, 0.25)])
@pytest.mark.parametrize("fp8", [False, True])
def test_gemma_31b_shapes_bf16(d, hq, hkv, k_eq_v, partial, fp8):
    dt = torch.bfloat16
    e4 = torch.float8_e4m3fn
    qkv, qn, kn, vn, cos, sin, kc, vc, slots = setup(16, hq, hkv, d, dt, k_eq_v, partial, e4 if fp8 else None,
                                                     blocks=8, bs=16)
    want_kc, want_vc = kc.clone(), vc.clone()
    q_ref, k_ref, v_ref = unfused(qkv, hq, hkv, d, qn, kn, vn, cos, sin, k_eq_v)
    ks, vs = torch.tensor(0.05, device=DEV), torch.tensor(0.02, device=DEV)
    cache_ops.write_kv(k_ref, v_ref, want_kc, want_vc, slots, ks, vs)
    q = K.qkv_norm_rope_write(qkv, hq, hkv, d, qn.weight, kn.weight, cos, sin, qn.eps, kc, vc, slots, ks, vs, k_eq_v)
    ulp_close(q, q_ref, dt)
    if fp8:  # quant-query fused in: the same bits as quantizing the q it returns
        qs = torch.tensor(0.03, device=DEV)
        kc2, vc2 = kc.clone(), vc.clone()
        q8 = K.qkv_norm_rope_write(qkv, hq, hkv, d, qn.weight, kn.weight, cos, sin, qn.eps, kc2, vc2, slots, ks, vs,
                                   k_eq_v, q_scale=qs, q_dtype=e4)
        assert torch.equal(q8.view(torch.uint8), cache_ops.quantize_query(q, qs, e4).view(torch.uint8))
        assert torch.equal(kc2.view(torch.uint8), kc.view(torch.uint8))
    if fp8:  # one bf16 step before quantizing can move an fp8 value by at most one fp8 step
        for got, want in ((kc, want_kc), (vc, want_vc)):
            diff = (got.float() - want.float()).abs()
            assert bool((diff <= want.float().abs() * 2.0**-3 + 2.0**-9).all())
            assert float((diff > 0).float().mean()) < 0.01
    else:
        ulp_close(kc, want_kc, dt)
        ulp_close(vc, want_vc, dt)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("q8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_quantized_q_is_the_quant_query_of_its_own_q(dtype, q8):
    """Quant-query fused in: q comes back as kernels/quant_query would quantize the q this kernel returns
    unquantized (clamped past the FP8 range, as at a small scale); the cache writes do not change."""
    hq, hkv, d = 4, 2, 32
    qkv, qn, kn, vn, cos, sin, kc, vc, slots = setup(5, hq, hkv, d, dtype)
    args = (qkv, hq, hkv, d, qn.weight, kn.weight, cos, sin, qn.eps)
    kc2, vc2 = kc.clone(), vc.clone()
    q = K.qkv_norm_rope_write(*args, kc, vc, slots)
    fmax = torch.finfo(q8).max
    scale = torch.tensor(float(q.float().abs().max()) / fmax / 2, device=DEV)  # the largest |q| clamps
    got = K.qkv_norm_rope_write(*args, kc2, vc2, slots, q_scale=scale, q_dtype=q8)
    want = cache_ops.quantize(q, scale, q8)
    assert got.dtype == q8 and got.shape == q.shape
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)
    g8, w8 = got.view(torch.uint8), want.view(torch.uint8)
    assert bool((want.float().abs() == fmax).any())  # the clamp is exercised
    if DEV == "cuda":
        assert torch.equal(g8, w8)
    else:  # the interpreter's fp32->fp8 emulation rounds a few values wrongly (tests/kernels/test_quant_query.py)
        assert float((g8 != w8).float().mean()) < 0.1
        assert torch.equal(got.float().abs() == fmax, want.float().abs() == fmax)
        # the emulation's slips: ties rounded away from even, and a value rounding up into the next binade
        # coming out one binade low (half of it)
        g, w = got.float(), want.float()
        assert bool(((g - w).abs() <= 0.5 * w.abs()).all())


def test_quantized_q_needs_one_scale_and_an_fp8_dtype():
    qkv, qn, kn, vn, cos, sin, kc, vc, slots = setup(2, 2, 1, 16, torch.float32)
    args = (qkv, 2, 1, 16, qn.weight, kn.weight, cos, sin, qn.eps, kc, vc, slots)
    with pytest.raises(ValueError, match="one fp32 scale and an FP8 q_dtype"):
        K.qkv_norm_rope_write(*args, q_scale=torch.ones(2, device=DEV), q_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="FP8 q_dtype"):
        K.qkv_norm_rope_write(*args, q_scale=torch.tensor(1.0, device=DEV), q_dtype=torch.bfloat16)
