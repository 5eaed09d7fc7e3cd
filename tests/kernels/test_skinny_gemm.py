"""kernels/skinny_gemm (a small decode batch's projections on tensor cores) against an fp64 matmul, and its
epilogues against kernels/gemv's: one to sixteen rows, ragged edges, bad shapes."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, pdl_chains, rel, require_interpreter, ulp_close  # noqa: E402

from kselect.kernels import gemv  # noqa: E402
from kselect.kernels import skinny_gemm as K  # noqa: E402

require_interpreter(K._skinny_gemm_kernel)


def inputs(m, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(DEV, dtype), (torch.randn(n, k, generator=g) * 0.05).to(DEV, dtype)


@pytest.mark.parametrize("m,n,k,bn,bk", [(1, 37, 100, 16, 32), (5, 16, 64, 16, 64), (16, 70, 300, 32, 128),
                                        (11, 3, 20, 16, 16)])
def test_matches_matmul_at_ragged_edges(m, n, k, bn, bk):
    """Rows of x short of 16 and of W short of a block, K short of a tile: masked, not read."""
    x, w = inputs(m, n, k, torch.float32)
    got = K.skinny_gemm(x, w, block_n=bn, block_k=bk)
    assert got.shape == (m, n) and got.dtype == torch.float32
    torch.testing.assert_close(got, (x.double() @ w.double().T).float(), rtol=1e-5, atol=1e-5)


def test_bf16_rounds_once_from_fp32():
    x, w = inputs(16, 48, 96, torch.bfloat16, 1)
    want = x.double() @ w.double().T
    got = K.skinny_gemm(x, w, block_n=16, block_k=32)
    assert got.dtype == torch.bfloat16
    assert float(((got.double() - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2.0**-8 + 1e-5


def test_strided_rows_of_x_and_w():
    x, w = inputs(4, 20, 64, torch.float32, 2)
    xs, ws = torch.cat([x, x], 1)[:, :64], torch.cat([w, w], 1)[:, 64:]
    torch.testing.assert_close(K.skinny_gemm(xs, ws, block_n=16, block_k=32), x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_epilogues_round_as_the_gemv(dtype):
    """The scale and the logit softcap go through kernels/gemv.py's epilogue: for the same rounded dots the same
    values as the ops after the projection (scale: bit-equal; softcap: as gemv's own test bounds it)."""
    x, w = inputs(3, 64, 96, dtype, 15)
    y = K.skinny_gemm(x, w, block_n=16, block_k=32)
    assert torch.equal(K.skinny_gemm(x, w, block_n=16, block_k=32, scale=0.125), y * 0.125)
    w = w * 60
    y = K.skinny_gemm(x, w, block_n=16, block_k=32)
    got = K.skinny_gemm(x, w, block_n=16, block_k=32, softcap=30.0)
    import numpy as np

    want = torch.tanh(y * float(np.float32(1) / np.float32(30.0))) * 30.0
    if DEV == "cuda":
        assert torch.equal(got, want)
    else:
        ulp_close(got, want, dtype, max_frac=0.02)
    with pytest.raises(ValueError, match="softcap must be a positive number"):
        K.skinny_gemm(x, w, softcap=-1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,i,k", [(1, 24, 100), (9, 13, 64)])
def test_gelu_mul_paired_equals_projection_then_kernel(dtype, m, i, k):
    """[Wg; Wu] paired in one program: the projection of [M, 2I] then kernels/gelu_mul, bit for bit."""
    from kselect.kernels.gelu_mul import gelu_tanh_mul_packed

    x, w = inputs(m, 2 * i, k, dtype, 5)
    x = x * 8
    got = K.skinny_gemm_gelu_mul(x, w, block_n=16, block_k=32)
    assert got.shape == (m, i) and got.dtype == dtype
    assert torch.equal(got, gelu_tanh_mul_packed(K.skinny_gemm(x, w, block_n=16, block_k=32)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,i,k", [(1, 24, 100), (9, 13, 64), (16, 40, 96)])
def test_gelu_mul_paired_in_one_loop_equals_a_loop_each(dtype, m, i, k):
    """PAIR_ONE_LOOP (gate and up tiles in one K loop): each half's dots sum their K tiles in the same order, so the
    same bits as a loop each, ragged edges included; the switch is off outside its block and ignores a multiplier."""
    from kselect.kernels.gelu_mul import gelu_tanh_mul

    x, w = inputs(m, 2 * i, k, dtype, 6)
    x = x * 8
    want = K.skinny_gemm_gelu_mul(x, w, block_n=32, block_k=32)
    gate, mul = w[:i].contiguous(), inputs(m, i, k, dtype, 7)[0][:, :i].contiguous()
    with K.pair_one_loop(True):
        assert K.PAIR_ONE_LOOP
        got = K.skinny_gemm_gelu_mul(x, w, block_n=32, block_k=32)
        # the unpaired form keeps its loop, and its split-K
        y = K.skinny_gemm_gelu_mul(x, gate, mul, block_n=16, block_k=32, split_k=2)
        assert torch.equal(y, gelu_tanh_mul(K.skinny_gemm(x, gate, block_n=16, block_k=32, split_k=2), mul))
    assert not K.PAIR_ONE_LOOP
    assert torch.equal(got, want)


def test_gelu_mul_with_a_strided_multiplier():
    from kselect.kernels.gelu_mul import gelu_tanh_mul

    x, w = inputs(4, 20, 96, torch.bfloat16, 6)
    ple = torch.randn(4, 3, 20, generator=torch.Generator().manual_seed(7)).to(DEV, torch.bfloat16)[:, 1]
    got = K.skinny_gemm_gelu_mul(x * 8, w, ple, block_n=16, block_k=32)
    assert torch.equal(got, gelu_tanh_mul(K.skinny_gemm(x * 8, w, block_n=16, block_k=32), ple))


@pytest.mark.parametrize("x_shape,w_shape,match", [((1, 8), (4, 9), "unit column stride"),
                                                    ((0, 8), (4, 8), "1 to 16 rows"), ((17, 8), (4, 8), "1 to 16")])
def test_bad_shapes(x_shape, w_shape, match):
    with pytest.raises(ValueError, match=match):
        K.skinny_gemm(torch.zeros(x_shape, device=DEV), torch.zeros(w_shape, device=DEV))


def test_bad_inputs_and_block_sizes():
    x = torch.zeros(2, 16, device=DEV)
    with pytest.raises(ValueError, match="one dtype"):
        K.skinny_gemm(x, torch.zeros(4, 16, device=DEV, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="even row count"):
        K.skinny_gemm_gelu_mul(x, torch.zeros(5, 16, device=DEV))
    with pytest.raises(ValueError, match=r"mul \[2, 4\]"):
        K.skinny_gemm_gelu_mul(x, torch.zeros(4, 16, device=DEV), torch.zeros(2, 5, device=DEV))
    with pytest.raises(ValueError, match=r"block_n must be a power of two of at least 16 \(tensor-core tiles\), got 8"):
        K.skinny_gemm(x, torch.zeros(4, 16, device=DEV), block_n=8)


def test_configured_overrides_by_shape_and_restores():
    base = K.config(64, 300)
    with K.configured(lambda n, k: dict(block_n=32) if n == 64 else None):
        assert K.config(64, 300)["block_n"] == 32 and K.config(32, 300) == base
        x, w = inputs(2, 64, 300, torch.float32, 13)
        torch.testing.assert_close(K.skinny_gemm(x, w, block_k=64), x @ w.T, rtol=1e-5, atol=1e-5)
    assert K.config(64, 300) == base


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("n,k", [(3072, 2560), (2560, 10240), (256, 2560), (2560, 256), (262144, 2560)])
def test_gemma_sizes_bf16(m, n, k):
    """E4B's q/k/v, down, per-layer-input gate and projection, LM head at the default configs: within the bf16
    rounding of an fp64 matmul, and equal to kernels/gemv at one row up to a flipped rounding."""
    x, w = inputs(m, n, k, torch.bfloat16, 3)
    got = K.skinny_gemm(x, w)
    assert rel(got, x.double() @ w.double().T) < 4e-3
    if m == 1:
        ulp_close(got, gemv.gemv(x, w), torch.bfloat16, max_frac=0.02)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k,split", [(262144, 2560, 1), (2560, 10240, 4)])
def test_swap_at_gemma_sizes_bf16(n, k, split):
    """swap on wgmma at E4B's LM head and down projection (16 rows): within the bf16 rounding of an fp64 matmul, and
    at most a flipped rounding away from the plain kernel."""
    x, w = inputs(16, n, k, torch.bfloat16, 5)
    # stages given too: the card's table may hold 6 for this shape, more shared memory than these tiles have
    tile = dict(block_n=64, block_k=256, num_stages=4, split_k=split)
    got = K.skinny_gemm(x, w, swap=True, **tile)
    assert rel(got, x.double() @ w.double().T) < 4e-3
    ulp_close(got, K.skinny_gemm(x, w, **tile), torch.bfloat16, max_frac=0.02)


@pytest.mark.parametrize("m,n,k,bn,bk,split", [(16, 70, 300, 16, 32, 4), (3, 37, 100, 16, 32, 8),
                                               (1, 16, 64, 16, 16, 2), (16, 48, 96, 32, 32, 16)])
def test_split_k_sums_the_partials_once(m, n, k, bn, bk, split):
    """K cut into split ranges of whole tiles (a split past K's end adds zeros, (3, 37, 100, 8): 4 tiles, 8 splits):
    the tile's last program sums the fp32 partials and rounds once, and the tile counters are back to zero after the
    call (the next call, or a graph replay, starts clean); the epilogue runs once."""
    x, w = inputs(m, n, k, torch.float32, 7)
    got = K.skinny_gemm(x, w, block_n=bn, block_k=bk, split_k=split)
    torch.testing.assert_close(got, (x.double() @ w.double().T).float(), rtol=1e-5, atol=1e-5)
    assert int(K._COUNTERS[x.device].abs().sum()) == 0
    assert torch.equal(K.skinny_gemm(x, w, block_n=bn, block_k=bk, split_k=split, scale=0.5), got * 0.5)


@pytest.mark.parametrize("m,n,k,bn,bk,split", [(16, 70, 300, 64, 32, 1), (3, 37, 100, 16, 32, 4),
                                               (1, 130, 64, 128, 16, 1)])
def test_swap_sums_w_tile_times_x_tile_to_the_same_product(m, n, k, bn, bk, split):
    """swap: [BLOCK_N, K] @ [K, 16] per tile, transposed once; ragged rows of x and W, split-K and the epilogues as
    without it."""
    x, w = inputs(m, n, k, torch.float32, 21)
    got = K.skinny_gemm(x, w, block_n=bn, block_k=bk, split_k=split, swap=True)
    torch.testing.assert_close(got, (x.double() @ w.double().T).float(), rtol=1e-5, atol=1e-5)
    plain = K.skinny_gemm(x, w, block_n=bn, block_k=bk, split_k=split)
    assert torch.equal(K.skinny_gemm(x, w, block_n=bn, block_k=bk, split_k=split, swap=True, scale=0.25), got * 0.25)
    torch.testing.assert_close(got, plain, rtol=1e-6, atol=1e-6)


def test_swap_is_checked_and_the_gelu_projection_refuses_it():
    x, w = inputs(2, 32, 64, torch.float32, 3)
    with pytest.raises(ValueError, match="swap must be True or False, got 1"):
        K.skinny_gemm(x, w, swap=1)
    with pytest.raises(ValueError, match="has no swap"):
        K.skinny_gemm_gelu_mul(x, w, swap=True)
    assert K.config(32, 64)["swap"] is False
    plain = K.skinny_gemm_gelu_mul(x, w)
    with K.configured(lambda n, k: dict(swap=True)):  # a shape's swap is skinny_gemm's: the GeGLU kernel runs on
        assert torch.equal(K.skinny_gemm_gelu_mul(x, w), plain)


def test_split_k_in_bf16_rounds_once_and_matches_the_unsplit_sum_closely():
    x, w = inputs(16, 48, 256, torch.bfloat16, 9)
    one = K.skinny_gemm(x, w, block_n=16, block_k=32)
    four = K.skinny_gemm(x, w, block_n=16, block_k=32, split_k=4)
    want = x.double() @ w.double().T
    assert float(((four.double() - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2.0**-8 + 1e-5
    assert float((four.float() - one.float()).abs().max()) <= float(one.float().abs().max()) * 2.0**-7


def test_split_k_is_checked_and_the_gelu_projection_refuses_it():
    x, w = inputs(2, 32, 64, torch.float32, 3)
    for bad in (0, 65, 2.0):
        with pytest.raises(ValueError, match="split_k must be an integer from 1 to 64"):
            K.skinny_gemm(x, w, split_k=bad)
    with pytest.raises(ValueError, match="no split-K for"):
        K.skinny_gemm_gelu_mul(x, w, split_k=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_k_gelu_times_a_multiplier_equals_the_split_projection_then_the_kernel(dtype):
    """The per-layer-input gate's shape (a multiplier, not [gate; up]): with split-K the tile's last program applies
    gelu * mul to the summed dots, bit for bit the split projection then kernels/gelu_mul."""
    from kselect.kernels.gelu_mul import gelu_tanh_mul

    x, w = inputs(5, 40, 160, dtype, 21)
    x = x * 8
    mul = torch.randn(5, 40, generator=torch.Generator().manual_seed(4)).to(DEV, dtype)
    got = K.skinny_gemm_gelu_mul(x, w, mul, block_n=16, block_k=32, split_k=4)
    want = gelu_tanh_mul(K.skinny_gemm(x, w, block_n=16, block_k=32, split_k=4), mul)
    assert torch.equal(got, want) and int(K._COUNTERS[x.device].abs().sum()) == 0


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(3072, 2560), (2048, 2560), (2560, 2048), (2560, 10240), (256, 2560)])
def test_gemma_sizes_split_k_bf16(n, k):
    """E4B's small projections at 16 rows with the split-K configs of kselect/measurement/gemv_variants.py's sk_split,
    many times over (a missed release or reset would show as a wrong or stale tile): within the bf16 rounding of an
    fp64 matmul, the counters zero after; the gate's gelu * mul too."""
    from kselect.kernels.gelu_mul import gelu_tanh_mul
    from kselect.measurement.gemv_variants import sk_split

    cfg = sk_split(n, k)
    x, w = inputs(16, n, k, torch.bfloat16, 3)
    want = x.double() @ w.double().T
    for _ in range(20):
        got = K.skinny_gemm(x, w, **cfg)
        assert rel(got, want) < 4e-3
    torch.cuda.synchronize()
    assert int(K._COUNTERS[x.device].abs().sum()) == 0
    mul = torch.randn(16, n, device=DEV, dtype=torch.bfloat16)
    assert torch.equal(K.skinny_gemm_gelu_mul(x, w, mul, **cfg), gelu_tanh_mul(got, mul))


def test_w_prefetch_asks_for_whole_tiles_only_under_pdl_on_a_gpu(monkeypatch):
    """PREFETCH_W K tiles of W, in 128-byte lines a row (at least one a tile), asked of L2 before the PDL wait; none
    when the switch is off, the launch is plain or the interpreter runs it; the switch refuses other counts and is
    restored after its block."""
    from kselect.kernels import l2_prefetch, pdl

    bf16 = torch.zeros(1, dtype=torch.bfloat16)
    gpu_x = type("X", (), {"is_cuda": True, "dtype": torch.bfloat16, "element_size": lambda self: 2})()
    on = {"PDL": True}
    assert l2_prefetch.w_lines(2, on, gpu_x, 128) == dict(W_LINES=4, LINE=64)
    assert l2_prefetch.w_lines(2, on, gpu_x, 16)["W_LINES"] == 2  # a tile narrower than a line: its line
    p = dict(block_n=32, block_k=128, num_warps=4, num_stages=3)
    monkeypatch.setattr(pdl, "args", lambda t: {"PDL": True, "launch_pdl": True})
    monkeypatch.setattr(K, "card_of", lambda t: "NVIDIA A100-SXM4-80GB")
    assert K._launch(p, gpu_x)["W_LINES"] == 0  # off by default on a card without the rule
    monkeypatch.setattr(K, "card_of", lambda t: "NVIDIA H200")
    assert K._launch(p, gpu_x)["W_LINES"] == 4  # the H200's rule: two tiles (PREFETCH_W_BY_CARD)
    monkeypatch.setattr(K, "card_of", lambda t: "NVIDIA H100 80GB HBM3")
    assert K._launch(p, gpu_x)["W_LINES"] == 4  # the H100's rule: two tiles
    with K.prefetch_w(0):  # the switch overrides the card's rule
        assert K._launch(p, gpu_x)["W_LINES"] == 0
    with K.prefetch_w(2):
        assert K.PREFETCH_W == 2 and K._launch(p, gpu_x)["W_LINES"] == 4
        assert K._launch(p, bf16)["W_LINES"] == 0  # the interpreter
        monkeypatch.setattr(pdl, "args", lambda t: {"PDL": False})
        assert K._launch(p, gpu_x)["W_LINES"] == 0  # a plain launch
        x, w = inputs(3, 40, 96, torch.float32, 5)  # the same sums
        torch.testing.assert_close(K.skinny_gemm(x, w, block_n=16, block_k=32), (x.double() @ w.double().T).float(),
                                   rtol=1e-5, atol=1e-5)
    assert K.PREFETCH_W is None
    for bad in (3, -1, True, "2", 8):
        with pytest.raises(ValueError, match="prefetch_w takes 0, 1, 2 or 4 K tiles"):
            K.prefetch_w(bad)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("tiles", [2, 4])
@pytest.mark.parametrize("split", [1, 4])
def test_w_prefetch_under_pdl_equals_plain_launches(tiles, split):
    """A chain of 16-row projections, each reading the last one's output, with W's first K tiles asked of L2 before
    each PDL wait: the bits of plain launches (a prefetch is a hint and reads weights only); split-K too, and the
    paired GeGLU projection."""
    x, w = inputs(16, 2560, 2560, torch.bfloat16, 11)
    with K.prefetch_w(tiles):
        got = pdl_chains(lambda y, w: K.skinny_gemm(y, w, split_k=split), x, w, steps=20)
        assert torch.equal(got["pdl"], got["plain"]) and torch.equal(got["early"], got["plain"])
        gu = inputs(16, 2 * 2560, 2560, torch.bfloat16, 12)[1]
        paired = pdl_chains(lambda y, w: K.skinny_gemm_gelu_mul(y, gu) + y, x, w, steps=10)
        assert torch.equal(paired["pdl"], paired["plain"])


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_gelu_mul_paired_in_one_loop_equals_a_loop_each_on_a_gpu():
    """E4B's batch-16 gate/up with both halves in one K loop (PAIR_ONE_LOOP): the bits of a loop each, plain and
    under PDL, at the card's config and at 16 rows a half."""
    x, gu = inputs(16, 2 * 10240, 2560, torch.bfloat16, 13)
    for given in ({}, dict(block_n=32, block_k=128, num_stages=3)):
        want = K.skinny_gemm_gelu_mul(x, gu, **given)
        with K.pair_one_loop(True):
            got = K.skinny_gemm_gelu_mul(x, gu, **given)
        assert torch.equal(got, want)
    w = inputs(16, 2560, 10240, torch.bfloat16, 14)[1]
    with K.pair_one_loop(True):
        chained = pdl_chains(lambda y, w: K.skinny_gemm(K.skinny_gemm_gelu_mul(y, gu), w) + y, x, w, steps=6)
    assert torch.equal(chained["pdl"], chained["plain"])


@pytest.mark.parametrize("split", [1, 4])
def test_the_swap_prototype_computes_the_projection(split):
    """kselect.measurement.kernels.skinny_swap's plain-load kernel (the record bench/results/h100/swap_ab/ timed):
    x @ w.T, its split-K partials added into an fp32 output."""
    from kselect.measurement.kernels import skinny_swap

    require_interpreter(skinny_swap._swap)
    x, w = inputs(16, 128, 256, torch.float32, 31)
    got = skinny_swap.swap(x, w, block_n=64, block_k=64, stages=2, split=split)
    torch.testing.assert_close(got, x @ w.T, rtol=1e-5, atol=1e-5)

