"""kernels/gemv_tma against kernels/gemv: the same bits at the same K chunk (plain, scaled, softcapped, both GELU*up
forms), W's ragged edges zero-filled by the descriptor, and what it refuses."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, pdl_chains, require_interpreter  # noqa: E402

from kselect.kernels import gemv as G  # noqa: E402
from kselect.kernels import gemv_tma as T  # noqa: E402

require_interpreter(T._gemv_tma_kernel)


def inputs(n, k, dtype, seed=0, rows_of_w=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, k, generator=g).to(DEV, dtype)
    w = (torch.randn(rows_of_w or n, k, generator=g) * 0.05).to(DEV, dtype)
    return x, w, torch.randn(1, n, generator=g).to(DEV, dtype)


# ragged rows (37 of 8-row blocks) and a ragged last chunk (296 of 64); one chunk; fewer chunks than stages; E4B's K
# in more chunks than stages (16 one-row programs: the interpreter runs each in turn)
SHAPES = [(37, 296, 8, 64, 3), (16, 64, 4, 64, 2), (5, 256, 16, 128, 4), (16, 2560, 1, 256, 6)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k,bn,bk,stages", SHAPES)
def test_the_gemv_bits_at_the_same_chunk(dtype, n, k, bn, bk, stages):
    x, w, mul = inputs(n, k, dtype)
    cfg = dict(block_n=bn, block_k=bk)
    assert torch.equal(T.gemv_tma(x, w, stages=stages, **cfg), G.gemv(x, w, **cfg))
    assert torch.equal(T.gemv_tma(x, w, scale=0.3, softcap=2.0, **cfg), G.gemv(x, w, scale=0.3, softcap=2.0, **cfg))
    assert torch.equal(T.gemv_tma_gelu_mul(x, w, mul, **cfg), G.gemv_gelu_mul(x, w, mul, **cfg))
    _, w2, _ = inputs(n, k, dtype, 1, rows_of_w=2 * n)  # [gate; up]: a program reads the same rows of both halves
    assert torch.equal(T.gemv_tma_gelu_mul(x, w2, **cfg), G.gemv_gelu_mul(x, w2, block_n=bn, block_k=bk))


def test_close_to_fp64_and_config_by_shape():
    x, w, _ = inputs(300, 512, torch.float32, 2)
    torch.testing.assert_close(T.gemv_tma(x, w), (x.double() @ w.double().T).float(), rtol=1e-5, atol=1e-5)
    assert T.config(3072, 2560) == dict(block_n=8, block_k=256, stages=4, num_warps=4)
    with T.configured(lambda n, k: dict(stages=2) if n == 3072 else None):
        assert T.config(3072, 2560)["stages"] == 2 and T.config(2560, 2048)["stages"] == 4
    assert T.config(3072, 2560)["stages"] == 4


def test_fits_and_refusals():
    x, w, _ = inputs(8, 96, torch.bfloat16)
    assert T.fits(x, w)
    w90 = w[:, :90].contiguous()  # a 180-byte row stride: TMA takes multiples of 16 bytes
    assert not T.fits(x[:, :90], w90) and not T.fits(torch.cat([x, x]), w) and T.fits(x[:, :90], w[:, :90])
    with pytest.raises(ValueError, match="16 bytes"):
        T.gemv_tma(x[:, :90], w90)
    with pytest.raises(ValueError, match="1 to 1 rows"):
        T.gemv_tma(torch.cat([x, x]), w)
    with pytest.raises(ValueError, match="block_k must be a power of two from 1 to 256"):
        T.gemv_tma(x, w, block_k=512)
    with pytest.raises(ValueError, match="stages must be from 1 to 8"):
        T.gemv_tma(x, w, stages=0)
    with pytest.raises(ValueError, match="even row count"):
        T.gemv_tma_gelu_mul(x, w[:7])
    with pytest.raises(ValueError, match="positive"):
        T.gemv_tma(x, w, softcap=0.0)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k,paired", [(3072, 2560, False), (2560, 10240, False), (20480, 2560, True),
                                        (262144, 2560, False)])  # E4B q/k/v, down, gate/up, the LM head
def test_gemma_sizes_equal_the_gemv_on_the_gpu(n, k, paired):
    x, w, mul = inputs(n // 2 if paired else n, k, torch.bfloat16, 3, rows_of_w=n)
    for bn, bk, stages in ((8, 256, 4), (2, 128, 6)):
        if paired:
            assert torch.equal(T.gemv_tma_gelu_mul(x, w, block_n=bn, block_k=bk, stages=stages),
                               G.gemv_gelu_mul(x, w, block_n=bn, block_k=bk))
        else:
            assert torch.equal(T.gemv_tma(x, w, block_n=bn, block_k=bk, stages=stages, softcap=30.0),
                               G.gemv(x, w, block_n=bn, block_k=bk, softcap=30.0))


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_pdl_chain_equals_plain_launches():
    """Launched with PDL, each kernel reads its first W chunk before the wait and x after it: a chain of GEMVs, each
    reading the last one's output, gives the bits of plain launches (and with PDL's early release)."""
    x, w, _ = inputs(2560, 2560, torch.bfloat16, 9)
    got = pdl_chains(T.gemv_tma, x, w)
    assert torch.equal(got["pdl"], got["plain"]) and torch.equal(got["early"], got["plain"])
