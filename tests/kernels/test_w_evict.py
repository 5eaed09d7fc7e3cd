"""kernels/w_evict.py: the evict-first switch and card rule, and W's loads through it giving the same values (the
hint is the GPU's; its PTX is checked in test_sm90_compile.py)."""

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


require_interpreter(_copy)


@pytest.mark.parametrize("evict", [False, True])
def test_load_w_reads_the_tile_and_zeros_past_the_mask(evict):
    src = torch.arange(100, dtype=torch.float32, device=DEV)
    dst = torch.full((128,), -1.0, device=DEV)
    _copy[(1,)](src, dst, 100, EVICT_FIRST=evict)
    assert torch.equal(dst[:100], src) and not dst[100:].any()


class _GPU:
    """A stand-in for a CUDA tensor on a named card (only what `on` reads)."""
    is_cuda = True
    device = torch.device("cuda", 0)


def test_on_follows_the_switch_then_the_card_and_is_off_off_the_gpu(monkeypatch):
    monkeypatch.setattr(w_evict, "card_of", lambda t: "NVIDIA H100 80GB HBM3")
    assert w_evict.W_EVICT_FIRST is None and not w_evict.on(_GPU())  # no card has the rule yet
    monkeypatch.setattr(w_evict, "W_EVICT_FIRST_BY_CARD", {"NVIDIA H100 80GB HBM3"})
    assert w_evict.on(_GPU())
    with w_evict.evict_first(False):  # the switch overrides the card's rule
        assert not w_evict.on(_GPU())
    with w_evict.evict_first(True):
        assert w_evict.W_EVICT_FIRST is True and w_evict.on(_GPU())
        assert not w_evict.on(torch.zeros(1))  # the CPU interpreter: never
    assert w_evict.W_EVICT_FIRST is None


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA (off the GPU the switch is never on)")
def test_projections_give_the_same_bits_with_the_switch():
    """The switch reaches both projection kernels on the GPU (the hinted code compiles and runs) and changes no
    result."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 96, generator=g).to(DEV)
    w = (torch.randn(40, 96, generator=g) * 0.1).to(DEV)
    plain = gemv.gemv(x[:1], w, block_n=8, block_k=32), skinny_gemm.skinny_gemm(x, w, block_n=16, block_k=32)
    with w_evict.evict_first(True):
        hinted = gemv.gemv(x[:1], w, block_n=8, block_k=32), skinny_gemm.skinny_gemm(x, w, block_n=16, block_k=32)
    assert all(torch.equal(a, b) for a, b in zip(plain, hinted))
