"""kernels/gemv against an fp64 matmul: one to a few decode rows, masked edges, bad shapes."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, rel, require_interpreter  # noqa: E402

from kselect.kernels import gemv as K  # noqa: E402

require_interpreter(K._gemv_kernel)


def inputs(m, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(DEV, dtype), (torch.randn(n, k, generator=g) * 0.05).to(DEV, dtype)


@pytest.mark.parametrize("m,n,k,bn,bk", [(1, 37, 100, 8, 32), (3, 16, 64, 4, 64), (2, 5, 300, 16, 128)])
def test_matches_matmul_at_ragged_edges(m, n, k, bn, bk):
    x, w = inputs(m, n, k, torch.float32)
    got = K.gemv(x, w, block_n=bn, block_k=bk)
    want = (x.double() @ w.double().T).float()
    assert got.shape == (m, n) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bf16_rounds_once_from_fp32():
    x, w = inputs(1, 24, 96, torch.bfloat16, 1)
    want = (x.double() @ w.double().T)
    got = K.gemv(x, w, block_n=8, block_k=32)
    assert got.dtype == torch.bfloat16
    # fp32 accumulation rounded once to nearest bf16: within half a step (2^-8 relative at most)
    assert float(((got.double() - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2.0**-8 + 1e-5


def test_strided_rows_of_x_and_w():
    x, w = inputs(2, 20, 64, torch.float32, 2)
    xs, ws = torch.cat([x, x], 1)[:, :64], torch.cat([w, w], 1)[:, 64:]  # row strides 128, unit columns
    torch.testing.assert_close(K.gemv(xs, ws, block_n=4, block_k=32), (x @ w.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,w_shape,match", [((1, 8), (4, 9), "unit column stride"),
                                                    ((0, 8), (4, 8), "1 to 8 rows"), ((9, 8), (4, 8), "1 to 8 rows")])
def test_bad_shapes(x_shape, w_shape, match):
    with pytest.raises(ValueError, match=match):
        K.gemv(torch.zeros(x_shape, device=DEV), torch.zeros(w_shape, device=DEV))


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(3072, 2560), (2560, 10240), (262144, 2560)])  # E4B q/k/v, down, lm_head
def test_gemma_sizes_bf16(n, k):
    x, w = inputs(1, n, k, torch.bfloat16, 3)
    assert rel(K.gemv(x, w), (x.double() @ w.double().T)) < 4e-3
