"""kernels/gemv with the add-norm in its prologue (kernels/add_norm_prologue.py) against kernels/rms_norm's
add-norm kernel then the GEMV: the same projection and the same residual s, for each form Gemma's layers use."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import ADD_NORM_FORMS as FORMS, DEV, add_norm_weights, gpu, rel, require_interpreter  # noqa: E402

from kselect.kernels import gemv as K  # noqa: E402
from kselect.kernels.add_norm_prologue import AddNorm, fits  # noqa: E402
from kselect.kernels.rms_norm import add_rms_norm  # noqa: E402

require_interpreter(K._gemv_kernel)

def operands(m, k, n, dtype, form, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    y, res = (r(m, k) * 3).to(DEV, dtype), r(m, k).to(DEV, dtype)
    wa, scalar, wb = add_norm_weights(r, k, dtype, form)
    w = (r(n, k) * 0.05).to(DEV, dtype)
    return y, res, wa, scalar, wb, w


def unfused(y, res, wa, scalar, wb):
    s, n = add_rms_norm(y, res, wa, 1e-6, scalar, wb)
    return s, (n if wb is not None else s)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_projection_and_residual_equal_the_norm_kernel_then_the_gemv(form, dtype):
    y, res, wa, scalar, wb, w = operands(2, 96, 20, dtype, form)
    s_want, x = unfused(y, res, wa, scalar, wb)
    s = torch.empty_like(y)
    got = K.gemv(AddNorm(y, res, wa, 1e-6, scalar, wb, s), w, block_n=8, block_k=32)
    assert torch.equal(s, s_want)  # every program reads the same sums; program 0 writes s
    assert torch.equal(got, K.gemv(x, w, block_n=8, block_k=32))


@pytest.mark.parametrize("paired", [True, False])
def test_gelu_mul_projection_takes_the_prologue_too(paired):
    dtype = torch.bfloat16
    y, res, wa, scalar, wb, w = operands(1, 80, 24, dtype, "post_attn+pre_ffw", 1)
    mul = None if paired else torch.randn(1, 24).to(DEV, dtype)
    s_want, x = unfused(y, res, wa, scalar, wb)
    s = torch.empty_like(y)
    got = K.gemv_gelu_mul(AddNorm(y, res, wa, 1e-6, scalar, wb, s), w, mul, block_n=4, block_k=32)
    assert torch.equal(s, s_want)
    assert torch.equal(got, K.gemv_gelu_mul(x, w, mul, block_n=4, block_k=32))
    if paired:  # both halves' chunks in one loop rebuild x the same way
        with K.pair_one_loop(True):
            assert torch.equal(K.gemv_gelu_mul(AddNorm(y, res, wa, 1e-6, scalar, wb, s), w, None, block_n=4,
                                               block_k=32), got)


def test_a_first_chunk_wider_than_the_loop_rebuilds_the_same_x():
    y, res, wa, scalar, wb, w = operands(1, 300, 16, torch.bfloat16, "post_ple+scalar+next_input", 2)
    s = torch.empty_like(y)
    got = K.gemv(AddNorm(y, res, wa, 1e-6, scalar, wb, s), w, block_n=4, block_k=32, first_k=128)
    assert torch.equal(got, K.gemv(unfused(y, res, wa, scalar, wb)[1], w, block_n=4, block_k=32, first_k=128))


def test_fits_only_rows_the_prologue_can_hold():
    t = torch.zeros(1, 64)
    assert fits(t, t) and not fits(t, torch.zeros(1, 64, dtype=torch.bfloat16))
    assert not fits(torch.zeros(1, 8193), torch.zeros(1, 8193)) and not fits(torch.zeros(4), torch.zeros(4))


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(3072, 2560), (20480, 2560)])  # E4B q/k/v and gate/up after an add-norm
def test_gemma_sizes_bf16(n, k):
    y, res, wa, scalar, wb, w = operands(1, k, n, torch.bfloat16, "post_ple+scalar+next_input", 3)
    s_want, x = unfused(y, res, wa, scalar, wb)
    s = torch.empty_like(y)
    got = K.gemv(AddNorm(y, res, wa, 1e-6, scalar, wb, s), w)
    # the norms' fp32 sums may be ordered differently from the norm kernel's: a rounding of s or x may flip
    assert rel(s, s_want) < 1e-3 and rel(got, K.gemv(x, w)) < 2e-3
