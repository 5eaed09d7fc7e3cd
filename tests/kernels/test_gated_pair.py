"""kernels/gated_pair (a one-row gated projection pair as one kernel, added into an fp32 row) against the two-kernel
path it replaces (kernels/gemv.py's GELU*up GEMV, then the GEMV), in both layouts of the second projection, and the
add-norm that reads and zeros its row (kernels/rms_norm.py `zero_y`)."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, rel, require_interpreter  # noqa: E402

from kselect.kernels import gemv as G  # noqa: E402
from kselect.kernels import gated_pair as P  # noqa: E402
from kselect.kernels.rms_norm import add_rms_norm  # noqa: E402

require_interpreter(P._gated_pair_kernel)


def inputs(inter, k, n, dtype, paired, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, k, generator=g).to(DEV, dtype)
    w = (torch.randn(2 * inter if paired else inter, k, generator=g) * 0.05).to(DEV, dtype)
    wd = (torch.randn(n, inter, generator=g) * 0.05).to(DEV, dtype)
    mul = None if paired else torch.randn(1, inter, generator=g).to(DEV, dtype)
    return x, w, wd, mul


def two_kernels(x, w, wd, mul):
    """What the pair replaces: GELU*up in the first GEMV's epilogue, then the second GEMV (fp32 out)."""
    h = G.gemv_gelu_mul(x, w, mul)
    return h.double() @ wd.double().T


def pair(x, w, wd, mul, layout, **cfg):
    acc = torch.zeros(1, wd.shape[0], dtype=torch.float32, device=DEV)
    wd = wd.t().contiguous() if layout == "t" else wd
    return P.gated_pair(x, w, wd, acc, mul, down_t=layout == "t", **cfg)


# (inter, k, n, slice, block_k, programs): ragged slices, chunks and outputs; fewer programs than slices (each walks
# several); N a power of two (one register row) and not (two)
SHAPES = [(40, 96, 72, 4, 32, 3), (16, 64, 64, 8, 64, None), (37, 130, 2560 // 16, 2, 64, 5), (8, 32, 24, 8, 32, 1)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("layout", ["n", "t"])
@pytest.mark.parametrize("inter,k,n,slice_,bk,programs", SHAPES)
def test_equals_the_two_kernels(dtype, paired, layout, inter, k, n, slice_, bk, programs):
    x, w, wd, mul = inputs(inter, k, n, dtype, paired)
    got = pair(x, w, wd, mul, layout, slice=slice_, block_k=bk, programs=programs)
    want = two_kernels(x, w, wd, mul)
    # fp32: the same sums in another order; bf16: GELU*up is rounded where the GEMV's epilogue rounds it, so a
    # reordered dot can move one of its values by a bf16 step
    assert rel(got, want) < (1e-6 if dtype == torch.float32 else 4e-3)


def test_adds_into_the_row_and_the_add_norm_reads_and_zeros_it():
    x, w, wd, _ = inputs(24, 64, 48, torch.bfloat16, True, 1)
    acc = torch.full((1, 48), 0.5, device=DEV)
    P.gated_pair(x, w, wd, acc, slice=4, block_k=32)
    torch.testing.assert_close(acc.double(), 0.5 + two_kernels(x, w, wd, None), rtol=1e-2, atol=1e-2)
    g = torch.Generator().manual_seed(2)
    res, wa = torch.randn(1, 48, generator=g).to(DEV, torch.bfloat16), torch.randn(48, generator=g).to(DEV, torch.bfloat16)
    y = acc.to(torch.bfloat16)  # the row rounded as a GEMV rounds its output
    want, _ = add_rms_norm(y, res, wa, 1e-6)
    got, none = add_rms_norm(acc, res, wa, 1e-6, zero_y=True)
    assert none is None and got.dtype == torch.bfloat16 and torch.equal(got, want) and not acc.any()
    with pytest.raises(ValueError, match="zero_y needs an fp32 y"):
        add_rms_norm(y, res, wa, 1e-6, zero_y=True)


def test_refusals_and_config():
    x, w, wd, mul = inputs(16, 64, 32, torch.bfloat16, False)
    acc = torch.zeros(1, 32, device=DEV)
    with pytest.raises(ValueError, match="fp32 acc"):
        P.gated_pair(x, w, wd, acc.bfloat16(), mul)
    with pytest.raises(ValueError, match=r"wd \[I, N\]"):
        P.gated_pair(x, w, wd, acc, mul, down_t=True)  # [N, I] given as the transpose
    with pytest.raises(ValueError, match="mul"):
        P.gated_pair(x, w, wd, acc, mul[:, :8])
    assert P._split(2560) == (2048, 512) and P._split(2048) == (2048, 1) and P._split(5376) == (4096, 2048)
    assert P.config(10240, 2560)["programs"] is None
    with P.configured(lambda inter, k: dict(slice=2) if inter == 256 else None):
        assert P.config(256, 2560)["slice"] == 2 and P.config(10240, 2560)["slice"] == P.config(16, 64)["slice"]
    assert P.config(256, 2560)["slice"] == P.config(10240, 2560)["slice"]


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("inter,k,n,paired", [(10240, 2560, 2560, True), (256, 2560, 2560, False)])  # E4B MLP, PLE
@pytest.mark.parametrize("layout", ["n", "t"])
def test_gemma_sizes_on_the_gpu(inter, k, n, paired, layout):
    x, w, wd, mul = inputs(inter, k, n, torch.bfloat16, paired, 3)
    want = two_kernels(x, w, wd, mul)
    for cfg in (dict(), dict(slice=2, block_k=1024, programs=132), dict(slice=8, block_k=256, num_warps=4)):
        assert rel(pair(x, w, wd, mul, layout, **cfg), want) < 4e-3


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_pdl_chain_of_pairs_and_add_norms():
    """A chain of pairs launched with PDL, each read and zeroed by an add-norm whose output the next pair reads: each
    step equals the two-kernel path from the same input (a pair adds only after its wait, the add-norm zeros only
    after its own; a race would add a stale row). Steps are compared one by one: the chain itself amplifies the
    atomics' reordered fp32 sums, as any GELU chain amplifies rounding."""
    from kselect.kernels import pdl

    x, w, wd, _ = inputs(2048, 1024, 1024, torch.bfloat16, True, 4)
    wa = torch.ones(1024, device=DEV, dtype=torch.bfloat16)
    acc, ys = torch.zeros(1, 1024, device=DEV), [x]
    with pdl.on():
        for _ in range(20):
            P.gated_pair(ys[-1], w, wd, acc)
            ys.append(add_rms_norm(acc, x, wa, 1e-6, zero_y=True)[0])
    torch.cuda.synchronize()
    assert not acc.any()
    for y, nxt in zip(ys, ys[1:]):
        want, _ = add_rms_norm(two_kernels(y, w, wd, None).to(torch.bfloat16), x, wa, 1e-6)
        assert rel(nxt, want) < 1e-2
