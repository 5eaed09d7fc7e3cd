"""Shared bits of the fused-op tests: device, interpreter guard, relative error."""

import pytest
import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# On CPU the kernels run in Triton's interpreter (conftest sets TRITON_INTERPRET=1) at small shapes;
# on the GPU also at the real Gemma-4 sizes (marked gpu).
DTYPES = [torch.float32, torch.bfloat16]
gpu = pytest.mark.gpu


def require_interpreter(fn) -> None:
    if DEV == "cpu" and type(fn).__name__ != "InterpretedFunction":
        pytest.skip("no GPU, and the kernel module was imported before TRITON_INTERPRET=1 was set",
                    allow_module_level=True)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def ulp_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, max_frac: float = 0.01) -> None:
    """fp32: equal up to fp32 rounding (relative to the tensor's scale). bf16: at most `max_frac` of the
    elements differ from the unfused ops' value at all (the kernels round where PyTorch rounds; a norm's
    fp32 reduction order can flip a rounding), each by at most two bf16 steps counted at the element's
    magnitude plus the tensor's RMS (where rope's two terms cancel), and 2e-3 overall."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.isfinite(got.float()).all()
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * float(want.abs().max().clamp_min(1)))
    else:
        g, w = got.float(), want.float()
        bound = 2.0**-6 * (w.abs() + w.pow(2).mean().sqrt())
        worst = float(((g - w).abs() / bound).max())
        frac = float((g != w).float().mean())
        assert worst <= 1.0 and frac <= max_frac and rel(got, want) < 2e-3, (worst, frac, rel(got, want))


# (w_a, scalar, w_b) of an add-norm: Gemma-4's three a layer (gemma4/forward.py), and a number for the scalar
ADD_NORM_FORMS = {"post_attn+pre_ffw": (True, None, True), "post_ffw": (True, None, False),
                  "post_ple+scalar+next_input": (True, "tensor", True), "number_scalar": (False, 0.5, True)}


def add_norm_weights(r, d: int, dtype: torch.dtype, form: str):
    """(w_a, scalar, w_b) of an add-norm over d columns in `form`, the weights drawn with r (randn of a generator)."""
    has_wa, scalar, has_wb = ADD_NORM_FORMS[form]
    wa = (1 + 0.1 * r(d)).to(DEV, dtype) if has_wa else None
    wb = (1 + 0.1 * r(d)).to(DEV, dtype) if has_wb else None
    if scalar == "tensor":
        scalar = torch.tensor([0.75]).to(DEV, dtype)
    return wa, scalar, wb


def pdl_chains(gemv, x, w, steps: int = 50) -> dict:
    """A chain of `steps` one-row GEMVs on the GPU, each reading the last one's output (y = gemv(y, w) * 0.5 + x),
    launched plainly, with PDL, and with PDL's early release: {"plain", "pdl", "early"} -> the last y. Skips before
    SM90 (no programmatic dependent launch)."""
    from kselect.kernels import pdl

    with pdl.on():
        if not pdl.enabled(torch.zeros(1, device=DEV)):
            pytest.skip("no programmatic dependent launch before SM90")

    def chain():
        y = x
        for _ in range(steps):
            y = gemv(y, w) * 0.5 + x
        return y

    out = {"plain": chain()}
    with pdl.on():
        out["pdl"] = chain()
        with pdl.early():
            out["early"] = chain()
    return out
