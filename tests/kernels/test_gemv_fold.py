"""kernels/gemv_fold.py against the kernels it replaces (kernels/rms_norm.py's add-norm, then kernels/gemv.py's GEMV
or GELU GEMV) and against gemma4/ops.py's PyTorch maths, for the add-norms Gemma folds this way: after o_proj (before
gate/up) and the layer's end (a scalar, before q/k/v). fp32 equals up to reduction order; bf16 is as close to the
float64 maths as the unfused kernels are."""

import re

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, rel, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.ops import add_rms_norm as torch_add_norm  # noqa: E402
from kselect.kernels import gemv_fold as F  # noqa: E402
from kselect.kernels.gemv import gemv, gemv_gelu_mul  # noqa: E402
from kselect.kernels.rms_norm import add_rms_norm  # noqa: E402

require_interpreter(F._gemv_fold_kernel)
FORMS = {"post_attn+pre_ffw": (True, None), "post_ple+scalar+next_input": (True, "tensor"), "number": (False, 0.5)}


def operands(k, n, dtype, form, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    has_wa, scalar = FORMS[form]
    wa = (1 + 0.1 * r(k)).to(DEV, dtype) if has_wa else None
    if scalar == "tensor":
        scalar = torch.tensor([0.75]).to(DEV, dtype)
    return dict(y=r(1, k).to(DEV, dtype), res=r(1, k).to(DEV, dtype), wa=wa, scalar=scalar,
                wb=(1 + 0.1 * r(k)).to(DEV, dtype), w=(r(n, k) * 0.05).to(DEV, dtype))


def folded(o, paired=False):
    s = torch.empty_like(o["y"])
    f = F.FoldedNorm(o["y"], o["res"], o["wa"], 1e-6, o["scalar"], o["wb"], s)
    return F.gemv_fold(f, F.folded_weight(o["w"], o["wb"]), paired=paired), s


def unfused(o, paired=False):
    s, x = add_rms_norm(o["y"], o["res"], o["wa"], 1e-6, o["scalar"], o["wb"])
    return (gemv_gelu_mul(x, o["w"]) if paired else gemv(x, o["w"])), s


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("paired", [False, True], ids=["gemv", "gelu_mul"])
@pytest.mark.parametrize("k,n", [(96, 20), (700, 36), (1030, 18)])
def test_fold_equals_the_norm_then_the_projection_fp32(form, paired, k, n):
    """fp32: the projection as the norm kernel then the GEMV give it, up to reduction order; s the same too. K wider
    and narrower than a chunk and not a power of two, rows not filling the last program."""
    o = operands(k, n, torch.float32, form)
    got, s = folded(o, paired)
    want, want_s = unfused(o, paired)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(s, want_s, rtol=1e-6, atol=1e-6)


def exact(o, paired=False):
    """The projection in float64 from the bf16 operands, nothing rounded on the way: the truth both paths round."""
    d = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in o.items()}
    norm = lambda v: v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)  # noqa: E731
    s = d["res"] + norm(d["y"]) * (d["wa"] if d["wa"] is not None else 1.0)
    s = s * (d["scalar"] if d["scalar"] is not None else 1.0)
    out = (norm(s) * d["wb"]) @ d["w"].T
    if paired:
        g, u = out.chunk(2, dim=-1)
        out = torch.nn.functional.gelu(g, approximate="tanh") * u
    return out


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("paired", [False, True], ids=["gemv", "gelu_mul"])
def test_fold_bf16_is_as_close_to_the_exact_maths_as_the_unfused_kernels(form, paired):
    """bf16: x is never rounded and W * w_b is rounded once, where the unfused kernels round s and x. Against the
    float64 maths the fold is no further off than they are (within 25%), and the two differ by about one rounding of
    the output (two through GELU); s is rounded where the norm kernel rounds it."""
    o = operands(640, 48, torch.bfloat16, form, 1)
    got, s = folded(o, paired)
    want, want_s = unfused(o, paired)
    truth = exact(o, paired)
    assert rel(got, truth) <= 1.25 * rel(want, truth) + 1e-4, (rel(got, truth), rel(want, truth))
    assert rel(got, want) < 1.5e-2
    ulp_close(s, want_s, torch.bfloat16)


def test_fold_follows_the_pytorch_maths():
    """Against gemma4/ops.py's add-norm then a matmul in fp32: x' = norm((res + norm(y) * wa) * c) * wb, then W."""
    o = operands(200, 24, torch.float32, "post_ple+scalar+next_input", 2)
    got, s = folded(o)
    want_s, x = torch_add_norm(o["y"], o["res"], o["wa"], 1e-6, o["scalar"], o["wb"])
    torch.testing.assert_close(got, x @ o["w"].T, rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(s, want_s, rtol=1e-6, atol=1e-6)


def test_other_launch_parameters_and_refusals():
    o = operands(300, 20, torch.float32, "post_attn+pre_ffw", 3)
    want = folded(o)
    with F.configured(4, 128, 4):
        got = folded(o)
    torch.testing.assert_close(got[0], want[0], rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="powers of two"):
        F.configured(3, 128, 4)
    two = torch.cat([o["y"], o["y"]])
    assert not F.FoldedNorm.fits(two, two, o["wb"]) and not F.FoldedNorm.fits(o["y"], o["res"], None)
    with pytest.raises(ValueError, match="one row"):
        F.gemv_fold(F.FoldedNorm(o["y"], o["res"], o["wa"], 1e-6, None, o["wb"], o["res"]), o["w"][:, :-1])


@gpu
@pytest.mark.skipif(DEV == "cpu", reason="needs CUDA")
@pytest.mark.parametrize("paired", [False, True], ids=["gemv", "gelu_mul"])
def test_gpu_e4b_sizes(paired):
    """E4B's q/k/v (3,072 x 2,560) and gate/up (2 x 10,240 x 2,560) in bf16, as close to the float64 maths as the
    unfused kernels; under PDL the same bits as plain launches."""
    from kselect.kernels import pdl

    o = operands(2560, 20480 if paired else 3072, torch.bfloat16, "post_ple+scalar+next_input", 4)
    got, s = folded(o, paired)
    want, want_s = unfused(o, paired)
    truth = exact(o, paired)
    assert rel(got, truth) <= 1.25 * rel(want, truth) + 1e-4, (rel(got, truth), rel(want, truth))
    ulp_close(s, want_s, torch.bfloat16)
    with pdl.on():
        again, _ = folded(o, paired)
    torch.cuda.synchronize()
    assert torch.equal(got, again)


def test_fold_compiles_for_sm90_with_the_first_chunk_before_the_wait():
    """Plain and paired, the scalar a tensor or a number: W's first chunk (both halves' when paired) read before the
    PDL wait, nothing written before it."""
    from test_sm90_compile import sm90_ptx

    cases = [dict(id=f"paired={p}/ptr={s}", module="kselect.kernels.gemv_fold", kernel="_gemv_fold_kernel",
                  consts=dict(BLOCK_N=8, BLOCK_K=512, PAIRED=p, HAS_WA=True, HAS_SCALAR=True, SCALAR_PTR=s, PDL=True),
                  types={} if s else {"scalar": "fp32"}) for p in (False, True) for s in (True, False)]
    for ptx in sm90_ptx(cases).values():
        before, after = ptx.split("griddepcontrol.wait", 1)
        assert re.findall(r"ld\.global", before) and "st.global" not in before and "st.global" in after
