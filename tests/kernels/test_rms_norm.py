"""kernels/rms_norm against the model's unfused RMSNorm (+ residual add, layer scalar, second norm)."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, DTYPES, gpu, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.model import RMSNorm  # noqa: E402
from kselect.kernels import rms_norm as K  # noqa: E402

require_interpreter(K._add_rms_norm_kernel)


def norm(d, dtype, with_scale=True, seed=0):
    n = RMSNorm(d, 1e-6, with_scale=with_scale).to(DEV)
    if with_scale:
        with torch.no_grad():
            n.weight.copy_(torch.randn(d, generator=torch.Generator().manual_seed(seed)))
    return n.to(dtype)


def data(t, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, d, generator=g) * 3).to(DEV, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 80])  # 80: a row shorter than the power-of-two block
@pytest.mark.parametrize("with_scale", [True, False])
def test_rms_norm(dtype, d, with_scale):
    n, x = norm(d, dtype, with_scale), data(5, d, dtype, 1)
    ulp_close(K.rms_norm(x, n.weight, n.eps), n(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [False, True])
@pytest.mark.parametrize("second", [False, True])
def test_add_rms_norm(dtype, scalar, second):
    d = 96
    na, nb = norm(d, dtype, seed=2), norm(d, dtype, seed=3)
    y, res = data(4, d, dtype, 4), data(4, d, dtype, 5)
    s = torch.tensor([0.75], device=DEV).to(dtype) if scalar else None
    got_s, got_n = K.add_rms_norm(y, res, na.weight, na.eps, s, nb.weight if second else None)
    want_s = res + na(y)
    if scalar:
        want_s = want_s * s
    ulp_close(got_s, want_s, dtype)
    if second:
        ulp_close(got_n, nb(want_s), dtype)
    else:
        assert got_n is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_with_a_number_as_the_scalar(dtype):
    """A Python number scales in fp32, as PyTorch's `* 2.0**-0.5` does (Gemma's per-layer-input mix), over rows of a
    3-D input (tokens x layers x width): the unfused ops' values."""
    d = 80
    na = norm(d, dtype, seed=7)
    y, res = data(6, d, dtype, 8).view(2, 3, d), data(6, d, dtype, 9).view(2, 3, d)
    got, none = K.add_rms_norm(y, res, na.weight, na.eps, 2.0**-0.5)
    assert none is None and got.shape == (2, 3, d)
    ulp_close(got, (na(y) + res) * 2.0**-0.5, dtype)


def test_strided_rows_and_empty():
    d = 64
    n = norm(d, torch.float32)
    big = data(6, 2 * d, torch.float32, 6)
    ulp_close(K.rms_norm(big[:, d:], n.weight, n.eps), n(big[:, d:]), torch.float32)
    assert K.rms_norm(big[:0, :d], n.weight, n.eps).shape == (0, d)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("d", [2560, 5376])  # E4B and 31B hidden sizes
def test_gemma_sizes_bf16(d):
    na, nb = norm(d, torch.bfloat16, seed=7), norm(d, torch.bfloat16, seed=8)
    y, res = data(16, d, torch.bfloat16, 9), data(16, d, torch.bfloat16, 10)
    s = torch.tensor([0.5], device=DEV, dtype=torch.bfloat16)
    got_s, got_n = K.add_rms_norm(y, res, na.weight, na.eps, s, nb.weight)
    want_s = (res + na(y)) * s
    ulp_close(got_s, want_s, torch.bfloat16)
    ulp_close(got_n, nb(want_s), torch.bfloat16)


@pytest.mark.skipif(DEV != "cpu", reason="the interpreter runs the PDL wait as a Python call")
def test_residual_before_the_wait_only_where_switched_on_under_pdl(monkeypatch):
    """RES_EARLY: under PDL the add-norm reads its residual before the wait, y after it. A simulated wait that writes
    y (the kernel before) and then changes the residual tells the reads apart: with the switch the sum is over the
    residual as it was before the wait, without it over the residual after; the bits otherwise match the plain call."""
    d = 96
    na, nb = norm(d, torch.float32, seed=2), norm(d, torch.float32, seed=3)
    # one row: the interpreter runs programs one after another, so a second row's program would see the first's wait
    y_new, res_old, res_new = data(1, d, torch.float32, 4), data(1, d, torch.float32, 5), data(1, d, torch.float32, 6)

    def call(early):
        y, res = torch.zeros_like(y_new), res_old.clone()

        def wait_then_release(pdl):
            y.copy_(y_new)
            res.copy_(res_new)

        with monkeypatch.context() as m:
            m.setattr(K, "wait_then_release", wait_then_release)
            m.setattr(K.pdl, "args", lambda t, **kw: {"PDL": True})
            with K.res_before_wait(early):
                return K.add_rms_norm(y, res, na.weight, na.eps, None, nb.weight)

    for early, res in ((True, res_old), (False, res_new)):
        want = K.add_rms_norm(y_new, res, na.weight, na.eps, None, nb.weight)
        got = call(early)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), early
    assert not K.RES_EARLY
