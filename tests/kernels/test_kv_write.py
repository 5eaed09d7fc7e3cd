"""kernels/kv_write (the sync-free paged write) against cache_ops.write_kv's PyTorch path."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, require_interpreter  # noqa: E402

from kselect.kernels import cache_ops  # noqa: E402
from kselect.kernels import kv_write as K  # noqa: E402

require_interpreter(K._kv_write_kernel)
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def case(cache_dtype, t=6, hkv=2, d=32, blocks=4, bs=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.float32 if DEV == "cpu" else torch.bfloat16
    k = (torch.randn(t, hkv, d, generator=g) * 40).to(DEV, src)  # past e4m3's 448 after scaling: clamps
    v = torch.randn(t, hkv, d, generator=g).to(DEV, src)
    slots = torch.randperm(blocks * bs, generator=g)[:t].to(DEV)
    slots[1] = -1  # padding
    fill = torch.randn(blocks, bs, hkv, d, generator=g).to(DEV)
    return k, v, slots, fill.to(cache_dtype), fill.to(cache_dtype).clone()


def reference(k, v, kc, vc, slots, ks=None, vs=None):
    kc, vc = kc.clone(), vc.clone()
    cache_ops.write_kv(k, v, kc, vc, slots, ks, vs)  # the PyTorch path (CPU, or forced below)
    return kc, vc


@pytest.mark.parametrize("dtype", [torch.float32, E4, E5])
@pytest.mark.parametrize("per_head", [False, True])
def test_matches_pytorch_write(dtype, per_head, monkeypatch):
    k, v, slots, kc, vc = case(dtype)
    ks = torch.tensor([0.09, 0.2] if per_head else 0.09, device=DEV) if dtype != torch.float32 else None
    vs = torch.tensor([0.5, 0.25] if per_head else 0.5, device=DEV) if dtype != torch.float32 else None
    monkeypatch.setattr(cache_ops, "_use_triton", lambda x: False)
    want_k, want_v = reference(k, v, kc, vc, slots, ks, vs)
    K.write_kv_triton(k, v, kc, vc, slots, ks, vs)
    for got, want in ((kc, want_k), (vc, want_v)):
        if DEV == "cuda" or dtype == torch.float32:
            # bit-identical on the GPU: the same fp32 division and clamp, the same round-to-nearest-even
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
        else:  # Triton's interpreter emulates fp32->fp8 with rare wrong roundings (124.4 -> 64 seen; ~3% of elements),
            # so on CPU: slots not written stay bit-identical, written ones agree almost everywhere
            written = torch.zeros(got.shape[0] * got.shape[1], dtype=torch.bool, device=DEV)
            written[slots[slots >= 0]] = True
            g8, w8 = got.view(torch.uint8).flatten(0, 1), want.view(torch.uint8).flatten(0, 1)
            assert torch.equal(g8[~written], w8[~written])
            assert float((g8[written] != w8[written]).float().mean()) < 0.1


def test_bad_scale_shape():
    k, v, slots, kc, vc = case(E4)
    with pytest.raises(ValueError, match="1 or 2"):
        K.write_kv_triton(k, v, kc, vc, slots, torch.ones(3, device=DEV), None)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_cache_ops_uses_kernel_without_sync():
    k, v, slots, kc, vc = case(torch.bfloat16, t=16, hkv=4, d=256, blocks=8, bs=16)
    want_k, want_v = kc.clone(), vc.clone()
    keep = slots >= 0
    want_k.view(-1, 4, 256)[slots[keep]] = k[keep]
    want_v.view(-1, 4, 256)[slots[keep]] = v[keep]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a device->host sync inside raises
    try:
        cache_ops.write_kv(k, v, kc, vc, slots)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
