"""kernels/w_evict.py: the evict-first switch, W's loads through it giving the same values, and the switch reaching
both projection kernels' W loads (the hint itself is the GPU's; its PTX is checked in test_sm90_compile.py)."""

import pytest
import torch

pytest.importorskip("triton")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from fused_helpers import DEV, gpu, require_interpreter  # noqa: E402

from kselect.kernels import gemv, skinny_gemm, w_evict  # noqa: E402


@triton.jit
def _copy(src, dst, n, EVICT_FIRST: tl.constexpr):
    i = tl.arange(0, 128)
    tl.store(dst + i, w_evict.load_w(src + i, i < n, EVICT_FIRST), mask=i < 128)


@triton.jit
def _doubled_when_hinted(ptrs, mask, EVICT_FIRST: tl.constexpr):
    """A stand-in for load_w that shows which loads were asked to be evict-first: it doubles them."""
    w = tl.load(ptrs, mask=mask, other=0.0)
    if EVICT_FIRST:
        w = w * 2
    return w


require_interpreter(_copy)


@pytest.mark.parametrize("evict", [False, True])
def test_load_w_reads_the_tile_and_zeros_past_the_mask(evict):
    src = torch.arange(100, dtype=torch.float32, device=DEV)
    dst = torch.full((128,), -1.0, device=DEV)
    _copy[(1,)](src, dst, 100, EVICT_FIRST=evict)
    assert torch.equal(dst[:100], src) and not dst[100:].any()


class _GPU:
    """A stand-in for a CUDA tensor (only what `on` reads)."""
    is_cuda = True


def test_on_follows_the_switch_and_is_off_off_the_gpu():
    assert w_evict.W_EVICT_FIRST is False and not w_evict.on(_GPU())  # off by default
    with w_evict.evict_first(True):
        assert w_evict.on(_GPU())
        assert not w_evict.on(torch.zeros(1))  # the CPU interpreter: never
    assert w_evict.W_EVICT_FIRST is False


def _projections(x, w):
    return (gemv.gemv(x[:1], w, block_n=8, block_k=32), gemv.gemv_gelu_mul(x[:1], w, block_n=8, block_k=32),
            skinny_gemm.skinny_gemm(x, w, block_n=16, block_k=32))


def test_the_switch_reaches_every_projections_w_loads_and_only_them(monkeypatch):
    """With `on` true, each kernel hands EVICT_FIRST to its W loads: a stand-in that doubles the hinted loads doubles
    the dots (x unhinted); with it false nothing changes. Float32, so doubling is exact."""
    require_interpreter(gemv._gemv_kernel)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 96, generator=g).to(DEV)
    w = (torch.randn(40, 96, generator=g) * 0.1).to(DEV)
    monkeypatch.setattr(gemv, "load_w", _doubled_when_hinted)
    monkeypatch.setattr(skinny_gemm, "load_w", _doubled_when_hinted)
    plain = _projections(x, w)
    pair_doubled = gemv.gemv_gelu_mul(x[:1] * 2, w, block_n=8, block_k=32)  # both halves' dots doubled (exact)
    monkeypatch.setattr(w_evict, "on", lambda t: True)
    hinted = _projections(x, w)
    assert torch.equal(hinted[0], plain[0] * 2) and torch.equal(hinted[2], plain[2] * 2)
    assert torch.equal(hinted[1], pair_doubled) and not torch.equal(hinted[1], plain[1])


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA (off the GPU the switch is never on)")
def test_projections_give_the_same_bits_with_the_hint():
    """On the GPU the hinted kernels compile, run, and change no result."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 96, generator=g).to(DEV)
    w = (torch.randn(40, 96, generator=g) * 0.1).to(DEV)
    plain = _projections(x, w)
    with w_evict.evict_first(True):
        assert w_evict.on(x)
        hinted = _projections(x, w)
    assert all(torch.equal(a, b) for a, b in zip(plain, hinted))
