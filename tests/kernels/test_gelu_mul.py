"""kernels/gelu_mul against the model's unfused gelu_tanh(gate) * up."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, DTYPES, gpu, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.model import gelu_tanh  # noqa: E402
from kselect.kernels import gelu_mul as K  # noqa: E402

require_interpreter(K._gelu_mul_kernel)
# tanh from exp differs from the library tanh by a few fp32 ulps: ~6% of bf16 outputs land one step away
TANH_FRAC = 0.1


def packed(t, i, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, 2 * i, generator=g) * 4).to(DEV, dtype)  # wide range: tanh saturates both ways


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("i", [48, 200])
def test_packed(dtype, i):
    gu = packed(3, i, dtype)
    ulp_close(K.gelu_tanh_mul_packed(gu), gelu_tanh(gu[:, :i]) * gu[:, i:], dtype, max_frac=TANH_FRAC)


def test_separate_inputs_and_bad_shapes():
    gate, up = packed(4, 32, torch.float32, 1)[:, :32], packed(4, 16, torch.float32, 2)
    ulp_close(K.gelu_tanh_mul(gate, up), gelu_tanh(gate) * up, torch.float32)
    with pytest.raises(ValueError, match="unit column stride"):
        K.gelu_tanh_mul(gate, up.T)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("i", [10240, 21504])  # E4B and 31B MLP widths
def test_gemma_sizes_bf16(i):
    gu = packed(16, i, torch.bfloat16, 3)
    ulp_close(K.gelu_tanh_mul_packed(gu), gelu_tanh(gu[:, :i]) * gu[:, i:], torch.bfloat16, max_frac=TANH_FRAC)
