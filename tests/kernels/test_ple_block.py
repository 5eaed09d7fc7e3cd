"""kernels/ple_block.py against the kernels it replaces (kernels/rms_norm.py's add-norm, kernels/gemv.py's gelu GEMV
and GEMV, the add-norm again) and against gemma4/ops.py's PyTorch maths: the block with and without the MLP's
add-norm before it, at shapes whose rows do not fill the last program. On CPU its phases run as three launches; on the
GPU (marked) as one, with the grid barrier, at E4B's sizes and chained under PDL."""

import re

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, require_interpreter, ulp_close  # noqa: E402

from kselect.gemma4.ops import add_rms_norm as torch_add_norm  # noqa: E402
from kselect.kernels import ple_block as B  # noqa: E402
from kselect.kernels.gemv import gemv, gemv_gelu_mul  # noqa: E402
from kselect.kernels.rms_norm import add_rms_norm  # noqa: E402

require_interpreter(B._ple_block_kernel)


def operands(h, p, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    d = dict(y=r(1, h), res0=r(1, h), w0=1 + 0.1 * r(h), ple=r(3, p)[1:2], wg=r(p, h) * 0.05, wp=r(h, p) * 0.05,
             wa=1 + 0.1 * r(h), scalar=torch.tensor([0.75]), wb=1 + 0.1 * r(h))
    return {k: v.to(DEV, dtype) for k, v in d.items()}


def unfused(o, pre: bool):
    """The kernels the block replaces, one launch each."""
    s = add_rms_norm(o["y"], o["res0"], o["w0"], 1e-6)[0] if pre else o["res0"]
    g = gemv_gelu_mul(s, o["wg"], o["ple"])
    return add_rms_norm(gemv(g, o["wp"]), s, o["wa"], 1e-6, o["scalar"], o["wb"])


def fused(o, pre: bool):
    if pre:
        s = torch.empty_like(o["y"])
        x, xn = B.ple_block(None, o["ple"], o["wg"], o["wp"], s, o["wa"], 1e-6, o["scalar"], o["wb"],
                            pre=(o["y"], o["res0"], o["w0"], s))
        return x, xn, s
    x, xn = B.ple_block(o["res0"], o["ple"], o["wg"], o["wp"], o["res0"], o["wa"], 1e-6, o["scalar"], o["wb"])
    return x, xn, None


@pytest.mark.parametrize("pre", [False, True], ids=["block", "with_mlp_add_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h,p", [(80, 24), (130, 40)])
def test_block_equals_the_kernels_it_replaces(pre, dtype, h, p):
    """x and xn as the four kernels give them (up to the dots' fp32 order); with the MLP's add-norm, s stored too.
    (80, 24): the gate's rows end inside a program; (130, 40): neither size a power of two, 9 programs."""
    o = operands(h, p, dtype)
    x, xn, s = fused(o, pre)
    want_x, want_xn = unfused(o, pre)
    ulp_close(x, want_x, dtype)
    ulp_close(xn, want_xn, dtype)
    if pre:
        assert torch.equal(s, add_rms_norm(o["y"], o["res0"], o["w0"], 1e-6)[0])


def test_block_follows_the_pytorch_maths():
    """Against gemma4/ops.py's ops (the reference the fused ops are tested against), the residual not the gate's
    input: x' = (res + norm(p) * wa) * scalar, where p is projected from the gate's own input."""
    o = operands(96, 32, torch.float32, 3)
    gate_in = o["y"]
    x, xn = B.ple_block(gate_in, o["ple"], o["wg"], o["wp"], o["res0"], o["wa"], 1e-6, o["scalar"], o["wb"])
    p = (torch.nn.functional.gelu(gate_in @ o["wg"].T, approximate="tanh") * o["ple"]) @ o["wp"].T
    want_x, want_xn = torch_add_norm(p, o["res0"], o["wa"], 1e-6, o["scalar"], o["wb"])
    torch.testing.assert_close(x, want_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xn, want_xn, rtol=1e-5, atol=1e-5)


def test_without_next_norm_xn_is_x():
    o = operands(64, 16, torch.float32, 1)
    x, xn = B.ple_block(o["res0"], o["ple"], o["wg"], o["wp"], o["res0"], o["wa"], 1e-6, None, None)
    assert xn is x
    want = add_rms_norm(gemv(gemv_gelu_mul(o["res0"], o["wg"], o["ple"]), o["wp"]), o["res0"], o["wa"], 1e-6)[0]
    ulp_close(x, want, torch.float32)


def test_other_launch_parameters_give_the_same_block():
    """Fewer programs, more rows each (kernels/ple_block.py `configured`): the same values; bad parameters refused."""
    o = operands(130, 40, torch.float32, 2)
    want = fused(o, True)
    with B.configured(4, 32, 4):
        assert B.programs(130, 40) == 10
        got = fused(o, True)
    for a, b in zip(got, want):
        ulp_close(a, b, torch.float32)
    with pytest.raises(ValueError, match="powers of two"):
        B.configured(3, 32, 4)


def test_refuses_what_it_cannot_run():
    o = operands(64, 16, torch.float32)
    two_rows = torch.cat([o["res0"], o["res0"]])
    with pytest.raises(ValueError, match="one row"):
        B.ple_block(two_rows, o["ple"], o["wg"], o["wp"], two_rows, o["wa"], 1e-6)
    s = torch.empty_like(o["y"])
    with pytest.raises(ValueError, match="its residual"):
        B.ple_block(None, o["ple"], o["wg"], o["wp"], o["res0"], o["wa"], 1e-6, pre=(o["y"], o["res0"], o["w0"], s))
    assert not B.fits(o["res0"], o["wg"], o["wp"].T, o["ple"])


@gpu
@pytest.mark.skipif(DEV == "cpu", reason="needs CUDA")
@pytest.mark.parametrize("pre", [False, True], ids=["block", "with_mlp_add_norm"])
def test_gpu_e4b_block_in_one_launch(pre):
    """E4B's sizes (2,560 x 256, 160 programs) in one launch with the grid barrier, against the four kernels; the
    counters back at zero; launched twice, the same bits."""
    o = operands(2560, 256, torch.bfloat16, 5)
    got = fused(o, pre)
    want = unfused(o, pre)
    ulp_close(got[0], want[0], torch.bfloat16)
    ulp_close(got[1], want[1], torch.bfloat16)
    assert torch.count_nonzero(B.barriers(torch.device(DEV))).item() == 0
    again = fused(o, pre)
    assert all(torch.equal(a, b) for a, b in zip(got[:2], again[:2]))


@gpu
@pytest.mark.skipif(DEV == "cpu", reason="needs CUDA")
def test_gpu_chain_under_pdl_equals_plain_launches():
    """30 blocks in a chain, each reading the last one's output, launched with PDL (the programs start beside the
    block before and read their weights early): the same bits as plain launches."""
    from kselect.kernels import pdl

    o = operands(2560, 256, torch.bfloat16, 6)

    def chain():
        x = o["res0"]
        for _ in range(30):
            x, _xn = B.ple_block(x, o["ple"], o["wg"], o["wp"], x, o["wa"], 1e-6, o["scalar"], o["wb"])
        return x

    plain = chain()
    with pdl.on():
        if not pdl.enabled(o["y"]):
            pytest.skip("no programmatic dependent launch before SM90")
        chained = chain()
    torch.cuda.synchronize()
    assert torch.equal(plain, chained)


def test_block_compiles_for_sm90_with_weights_before_the_wait_and_one_barrier():
    """One launch (PHASE 0) compiles for SM90: weight loads, the tail weights' L2 hints and no write before the PDL
    wait; after it two acquire-release arrivals (the barrier, the tail's count), one acquire poll, g and p read from
    L2, and no hint."""
    from test_sm90_compile import sm90_ptx

    consts = dict(H_PAD=4096, P_PAD=256, GR=B.GATE_ROWS, PR=B.PROJ_ROWS, HAS_W0=True, HAS_WA=True, HAS_SCALAR=True,
                  SCALAR_PTR=True, HAS_WB=True, PHASE=0, PDL=True, L2=True)
    cases = [dict(id=f"pre={pre}", module="kselect.kernels.ple_block", kernel="_ple_block_kernel",
                  consts=dict(consts, PRENORM=pre), types={"bar_ptr": "*i32"}) for pre in (False, True)]
    for ptx in sm90_ptx(cases).values():
        before, after = ptx.split("griddepcontrol.wait", 1)
        assert re.findall(r"ld\.global", before) and not re.findall(r"st\.global|atom\.", before)
        assert len(re.findall(r"prefetch\.global\.L2", before)) == 2 and "prefetch" not in after
        assert len(re.findall(r"atom\.global\.gpu\.acq_rel\.add", after)) == 2
        assert len(re.findall(r"ld\.global\.gpu\.acquire", after)) == 1 and re.findall(r"ld\.global\.cg", after)
