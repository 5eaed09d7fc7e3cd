"""kernels/embedding against `F.embedding(ids, w) * scale` (the two ops it replaces): bit-equal, ragged widths."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
from fused_helpers import DEV, DTYPES, gpu, require_interpreter  # noqa: E402

from kselect.kernels import embedding as K  # noqa: E402

require_interpreter(K._embedding_kernel)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 80, 4100])  # a row shorter than its block; one split over programs
def test_equals_the_gather_then_the_multiply(dtype, d):
    g = torch.Generator().manual_seed(d)
    w = torch.randn(37, d, generator=g).to(DEV, dtype)
    ids = torch.tensor([0, 36, 5, 5, 17], device=DEV)
    scale = float(torch.tensor(2560**0.5).to(dtype))  # Gemma's embedding scale, rounded to the table's dtype
    got = K.embedding_scaled(ids, w, scale)
    assert got.dtype == dtype and got.shape == (5, d)
    assert torch.equal(got, F.embedding(ids, w) * scale)


def test_no_ids_and_bad_inputs():
    w = torch.randn(4, 8, device=DEV)
    assert K.embedding_scaled(torch.zeros(0, dtype=torch.long, device=DEV), w, 2.0).shape == (0, 8)
    with pytest.raises(ValueError, match="integer ids"):
        K.embedding_scaled(torch.zeros(2, device=DEV), w, 2.0)
    with pytest.raises(ValueError, match="unit column stride"):
        K.embedding_scaled(torch.zeros(2, dtype=torch.long, device=DEV), w.t(), 2.0)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_gemma_tables_bf16():
    """E4B's token table (262144 x 2560) and per-layer-input table width (42 x 256): bit-equal on the GPU."""
    for v, d, s in ((262144, 2560, 2560**0.5), (4096, 10752, 256**0.5)):
        w = torch.randn(v, d, device=DEV, dtype=torch.bfloat16)
        ids = torch.randint(0, v, (7,), device=DEV)
        scale = float(torch.tensor(s).to(torch.bfloat16))
        assert torch.equal(K.embedding_scaled(ids, w, scale), F.embedding(ids, w) * scale)
