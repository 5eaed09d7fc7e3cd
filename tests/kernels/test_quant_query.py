"""kernels/quant_query (one-kernel quant-query) against cache_ops.quantize's PyTorch form: bit-equal."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, require_interpreter  # noqa: E402

from kselect.kernels import cache_ops  # noqa: E402
from kselect.kernels import quant_query as K  # noqa: E402

require_interpreter(K._quant_query_kernel)


def case(t=5, h=4, d=32, seed=0, strided=False):
    g = torch.Generator().manual_seed(seed)
    src = torch.float32 if DEV == "cpu" else torch.bfloat16
    x = torch.randn(t, h + (2 if strided else 0), d, generator=g) * 60  # past e4m3's 448 after scaling: clamps
    x = x.to(DEV, src)
    return x[:, :h] if strided else x  # rows of a wider qkv projection: strided rows


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("strided", [False, True])
def test_matches_pytorch_quantize(dtype, strided):
    q = case(strided=strided)
    scale = torch.tensor(0.37, device=DEV)  # not a power of two: Triton's "/" (approximate on the GPU) would show
    got = K.quantize_query_triton(q, scale, dtype)
    want = cache_ops.quantize(q, scale, dtype)
    assert got.dtype == dtype and got.shape == q.shape and got.is_contiguous()
    g8, w8 = got.view(torch.uint8), want.view(torch.uint8)
    if DEV == "cuda":  # the same fp32 division and clamp, the same round-to-nearest-even: the same bits
        assert torch.equal(g8, w8)
    else:  # Triton's interpreter emulates fp32->fp8 with rare wrong roundings (tests/kernels/test_kv_write.py)
        assert float((g8 != w8).float().mean()) < 0.1
        assert torch.equal(got.float().abs() == torch.finfo(dtype).max, want.float().abs() == torch.finfo(dtype).max)


def test_empty_batch_and_one_scale_only():
    q = case(t=0)
    assert K.quantize_query_triton(q, torch.tensor(1.0, device=DEV), torch.float8_e4m3fn).shape == (0, 4, 32)
    with pytest.raises(ValueError, match="one q scale"):
        K.quantize_query_triton(case(), torch.ones(4, device=DEV), torch.float8_e4m3fn)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_cache_ops_uses_one_kernel_on_cuda():
    from torch.profiler import ProfilerActivity, profile

    q, scale = case(t=64, h=32, d=256), torch.tensor(0.5, device="cuda")
    cache_ops.quantize_query(q, scale)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = cache_ops.quantize_query(q, scale)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert kernels == [n for n in kernels if "quant_query" in n] and len(kernels) == 1, kernels
    assert torch.equal(got.view(torch.uint8), cache_ops.quantize(q, scale, torch.float8_e4m3fn).view(torch.uint8))
