"""kernels/rope_tables against the model's three PyTorch kernels (gemma4/model.rope_row_tables): bit-equal on the GPU
(libdevice's cosf/sinf, which PyTorch's CUDA kernels call), within a rounding in the interpreter (numpy's cos/sin)."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, DTYPES, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.model import rope_row_tables  # noqa: E402
from kselect.kernels import rope_tables as K  # noqa: E402

require_interpreter(K._rope_tables_kernel)


def inv_row(dtype=torch.float32):
    """Both Gemma types' NeoX-doubled frequencies in one row: 128 of base 1e4 (sliding), 256 of base 1e6 (full)."""
    s = 1.0 / 10_000 ** (torch.arange(0, 256, 2, dtype=torch.float32) / 256)
    f = 1.0 / 1_000_000 ** (torch.arange(0, 512, 4, dtype=torch.float32) / 512)
    return torch.cat([s, s, f, f]).to(DEV, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inv_dtype", [torch.float32, torch.bfloat16])
def test_equals_the_three_pytorch_kernels(dtype, inv_dtype):
    positions = torch.tensor([0, 1, 7, 500, 4095, 131_071, 1_000_003], device=DEV)
    inv = inv_row(inv_dtype)
    got, want = K.rope_tables(positions, inv, dtype), rope_row_tables(positions, inv, dtype)
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == (7, inv.numel())
        if DEV == "cuda":
            assert torch.equal(g, w)
        elif dtype == torch.float32:  # numpy's and PyTorch's CPU cos agree to a few fp32 ulps at 1e6 rad
            torch.testing.assert_close(g, w, rtol=0, atol=2e-6)
        else:
            ulp_close(g, w, dtype, max_frac=0.01)


def test_bad_inputs_and_no_positions():
    inv = inv_row()
    assert K.rope_tables(torch.zeros(0, dtype=torch.long, device=DEV), inv, torch.float32)[0].shape == (0, inv.numel())
    with pytest.raises(ValueError, match="integer positions"):
        K.rope_tables(torch.zeros(3, device=DEV), inv, torch.float32)
