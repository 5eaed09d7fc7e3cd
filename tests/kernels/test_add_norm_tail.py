"""kernels/gemv with the add-norm after it in its last program (kernels/add_norm_tail.py) against the GEMV then
kernels/rms_norm's add-norm kernel: the same projection, residual s and normed n, for each form Gemma's layers use."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import ADD_NORM_FORMS as FORMS, DEV, add_norm_weights, gpu, require_interpreter, ulp_close  # noqa: E402

from kselect.kernels import add_norm_tail as T  # noqa: E402
from kselect.kernels import gemv as K  # noqa: E402
from kselect.kernels.add_norm_prologue import AddNorm  # noqa: E402
from kselect.kernels.rms_norm import add_rms_norm  # noqa: E402

require_interpreter(K._gemv_kernel)

def operands(m, k, n, dtype, form, seed=0):
    """The projection's x [m, k] and W [n, k], the add-norm's residual [m, n] and weights after o_proj, after down_proj
    (a PLE layer), after the per-layer projection, or with a number scalar (fused_helpers.ADD_NORM_FORMS)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    x, res = r(m, k).to(DEV, dtype), r(m, n).to(DEV, dtype)
    wa, scalar, wb = add_norm_weights(r, n, dtype, form)
    return x, (r(n, k) * 0.05).to(DEV, dtype), res, wa, scalar, wb


def with_tail(x, w, res, wa, scalar, wb, **cfg):
    s = torch.empty_like(res)
    n = torch.empty_like(res) if wb is not None else None
    y = K.gemv(x, w, tail=T.AddNormTail(res, wa, 1e-6, scalar, wb, s, n), **cfg)
    return y, s, (n if wb is not None else s)


def unfused(x, w, res, wa, scalar, wb, **cfg):
    y = K.gemv(x, w, **cfg)
    s, n = add_rms_norm(y, res, wa, 1e-6, scalar, wb)
    return y, s, (n if wb is not None else s)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n,bn", [(1, 96, 20, 8), (3, 32, 700, 32), (1, 32, 1030, 64)])
def test_tail_equals_the_gemv_then_the_norm_kernel(form, dtype, m, k, n, bn):
    """Every row, a row wider than one chunk (700, 1,030 > 512: the sums taken chunk by chunk) and narrower, N not a
    power of two: y as the plain GEMV's; s and n as the norm kernel's (the interpreter sums in the same order)."""
    ops = operands(m, k, n, dtype, form)
    got, want = with_tail(*ops, block_n=bn, block_k=32), unfused(*ops, block_n=bn, block_k=32)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_the_counter_is_reset_for_the_next_launch():
    """The last program resets the launch's counter: launches back to back (another grid size) each finish their tail."""
    ops = operands(1, 64, 300, torch.float32, "post_attn+pre_ffw", 1)
    first = with_tail(*ops, block_n=4, block_k=32)
    assert int(T.counter(ops[0].device).item()) == 0
    again = with_tail(*ops, block_n=16, block_k=32)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_refuses_what_it_cannot_take():
    x, w, res, wa, scalar, wb = operands(2, 64, 40, torch.float32, "post_ffw")
    s = torch.empty_like(res)
    with pytest.raises(ValueError, match=r"tail needs res \[2, 40\] with unit column stride"):
        K.gemv(x, w, tail=T.AddNormTail(res[:1], wa, 1e-6, None, None, s, None))
    with pytest.raises(ValueError, match="before the projection .x. or after it .tail., not both"):
        K.gemv(AddNorm(x, x, None, 1e-6, None, None, torch.empty_like(x)), w,
               tail=T.AddNormTail(res, wa, 1e-6, None, None, s, None))
    assert not T.AddNormTail.fits(torch.empty(1, 9000), 1, 9000) and T.AddNormTail.fits(torch.empty(1, 8192), 1, 8192)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n,k", [(2560, 2048), (2560, 10240), (2560, 256)])
def test_gemma_sizes_bf16(form, n, k):
    """E4B's o_proj, down_proj and per-layer projection on the GPU (one row: registers capped): y bit for bit, s and n
    as the norm kernel's within ulp_close (the GPU's fp32 sums run in another order, chunk by chunk)."""
    ops = operands(1, k, n, torch.bfloat16, form, 2)
    (y, s, nn), (y0, s0, n0) = with_tail(*ops), unfused(*ops)
    assert torch.equal(y, y0)
    ulp_close(s, s0, torch.bfloat16, max_frac=0.01)
    ulp_close(nn, n0, torch.bfloat16, max_frac=0.01)
