"""kernels/gemv against an fp64 matmul: one to a few decode rows, masked edges, bad shapes."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, gpu, pdl_chains, rel, require_interpreter, ulp_close  # noqa: E402

from kselect.kernels import gemv as K  # noqa: E402

require_interpreter(K._gemv_kernel)


def inputs(m, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(DEV, dtype), (torch.randn(n, k, generator=g) * 0.05).to(DEV, dtype)


@pytest.mark.parametrize("m,n,k,bn,bk", [(1, 37, 100, 8, 32), (3, 16, 64, 4, 64), (2, 5, 300, 16, 128)])
def test_matches_matmul_at_ragged_edges(m, n, k, bn, bk):
    x, w = inputs(m, n, k, torch.float32)
    got = K.gemv(x, w, block_n=bn, block_k=bk)
    want = (x.double() @ w.double().T).float()
    assert got.shape == (m, n) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bf16_rounds_once_from_fp32():
    x, w = inputs(1, 24, 96, torch.bfloat16, 1)
    want = (x.double() @ w.double().T)
    got = K.gemv(x, w, block_n=8, block_k=32)
    assert got.dtype == torch.bfloat16
    # fp32 accumulation rounded once to nearest bf16: within half a step (2^-8 relative at most)
    assert float(((got.double() - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2.0**-8 + 1e-5


def test_strided_rows_of_x_and_w():
    x, w = inputs(2, 20, 64, torch.float32, 2)
    xs, ws = torch.cat([x, x], 1)[:, :64], torch.cat([w, w], 1)[:, 64:]  # row strides 128, unit columns
    torch.testing.assert_close(K.gemv(xs, ws, block_n=4, block_k=32), (x @ w.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,w_shape,match", [((1, 8), (4, 9), "unit column stride"),
                                                    ((0, 8), (4, 8), "1 to 8 rows"), ((9, 8), (4, 8), "1 to 8 rows")])
def test_bad_shapes(x_shape, w_shape, match):
    with pytest.raises(ValueError, match=match):
        K.gemv(torch.zeros(x_shape, device=DEV), torch.zeros(w_shape, device=DEV))


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(3072, 2560), (2560, 10240), (262144, 2560)])  # E4B q/k/v, down, lm_head
def test_gemma_sizes_bf16(n, k):
    x, w = inputs(1, n, k, torch.bfloat16, 3)
    assert rel(K.gemv(x, w), (x.double() @ w.double().T)) < 4e-3


# ---------------------------------------------------------------------------- the epilogue: scale, logit softcap
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_epilogue_equals_the_multiply_after(dtype):
    """gemv(scale=s) rounds y, then y * s, as `gemv(x, w) * s` (a Python float) rounds: bit-equal."""
    x, w = inputs(1, 40, 96, dtype, 15)
    s = 2560**-0.5
    for s in (s, 0.0):  # 0.0 is a scale too, not "no scale"
        assert torch.equal(K.gemv(x, w, block_n=8, block_k=32, scale=s), K.gemv(x, w, block_n=8, block_k=32) * s)


def cuda_softcap(y, cap):
    """tanh(y / cap) * cap as PyTorch computes it on CUDA: dividing by a Python float multiplies by its fp32
    reciprocal (on CPU it divides)."""
    import numpy as np

    return torch.tanh(y * float(np.float32(1) / np.float32(cap))) * cap


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softcap_epilogue_equals_the_ops_after(dtype):
    """gemv(softcap=c): tanh(y / c) * c with each op's rounding, logits spread over tanh's range (|y| up to 3c). On
    the GPU bit-equal to PyTorch's CUDA ops after the GEMV (libdevice tanhf); in the interpreter tanh is the exp form
    (1e-7 absolute), so a bf16 rounding may flip."""
    x, w = inputs(2, 64, 96, dtype, 16)
    w = w * 60
    got = K.gemv(x, w, block_n=8, block_k=32, softcap=30.0)
    y = K.gemv(x, w, block_n=8, block_k=32)
    assert float(y.float().abs().max()) > 30.0  # saturating values are covered
    want = cuda_softcap(y, 30.0)
    if DEV == "cuda":
        assert torch.equal(got, want)
    else:
        ulp_close(got, want, dtype, max_frac=0.02)
    with pytest.raises(ValueError, match="softcap must be a positive number, got 0.0"):
        K.gemv(x, w, softcap=0.0)


# ---------------------------------------------------------------------------- the first chunk (read before a PDL wait)
@pytest.mark.parametrize("m,n,k,bn,bk,fk", [(1, 37, 100, 8, 16, 64), (2, 5, 300, 16, 32, 128), (1, 9, 100, 2, 32, 128),
                                           (3, 16, 64, 4, 64, 32)])
def test_first_chunk_wider_or_narrower_than_the_loop(m, n, k, bn, bk, fk):
    """A first chunk of other width than the loop's (whole K when first_k >= k, 128 >= 100) sums the same dots."""
    x, w = inputs(m, n, k, torch.float32, 11)
    got = K.gemv(x, w, block_n=bn, block_k=bk, first_k=fk)
    torch.testing.assert_close(got, (x.double() @ w.double().T).float(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- loads one chunk ahead of the multiplies
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k,bn,bk,fk", [(1, 37, 100, 8, 16, 16), (2, 5, 300, 16, 32, 128), (1, 9, 100, 2, 32, 128),
                                           (3, 16, 64, 4, 16, 16), (1, 6, 96, 2, 32, 32)])
def test_loads_ahead_sum_the_same_dots(dtype, m, n, k, bn, bk, fk):
    """ahead=1 only moves W's loads one chunk earlier: the same result bit for bit, at ragged K (the load past K's
    end is masked), a first chunk wider than the loop's, one chunk after it, none after it (k <= first_k)."""
    x, w = inputs(m, n, k, dtype, 17)
    plain = K.gemv(x, w, block_n=bn, block_k=bk, first_k=fk)
    assert torch.equal(K.gemv(x, w, block_n=bn, block_k=bk, first_k=fk, ahead=1), plain)
    torch.testing.assert_close(plain.double(), x.double() @ w.double().T, rtol=2e-2 if dtype != torch.float32 else 1e-5,
                               atol=1e-2 if dtype != torch.float32 else 1e-5)
    g = (torch.randn(m, n, generator=torch.Generator().manual_seed(3)) * 0.5).to(DEV, dtype)
    both = torch.cat([w, w.flip(0)])  # paired [gate; up] and the multiplier form
    assert torch.equal(K.gemv_gelu_mul(x, both, block_k=bk, first_k=fk, ahead=1),
                       K.gemv_gelu_mul(x, both, block_k=bk, first_k=fk))
    assert torch.equal(K.gemv_gelu_mul(x, w, g, block_k=bk, first_k=fk, ahead=1),
                       K.gemv_gelu_mul(x, w, g, block_k=bk, first_k=fk))


def test_ahead_is_off_by_default_and_checked():
    assert all(K.config(n, k)["ahead"] == 0 for n, k in ((3072, 2560), (2560, 10240), (262144, 2560)))
    with pytest.raises(ValueError, match="ahead must be 0 or 1, got 2"):
        K.gemv(*inputs(1, 8, 96, torch.float32), ahead=2)


def test_first_chunk_of_one_block_is_the_default():
    """The table's first chunk is one K chunk (what was measured fastest), and a caller's block_k without first_k sets
    both, so explicit block sizes keep meaning what they meant before first_k."""
    for n, k in ((3072, 2560), (20480, 2560), (2560, 256), (262144, 2560)):
        cfg = K.config(n, k)
        assert cfg["first_k"] == cfg["block_k"], (n, k)
    p = K._launch_params(3072, 2560, dict(block_n=None, block_k=32, first_k=None, num_warps=None))
    assert (p["block_k"], p["first_k"], p["block_n"]) == (32, 32, 2)
    assert K._launch_params(3072, 2560, dict(block_k=32, first_k=128))["first_k"] == 128


def test_configured_overrides_by_shape_and_restores():
    """configured(fn): fn's entries for the shapes it names, the table's elsewhere; restored on exit and on errors;
    the launch runs on them (a bad value is refused at the launch)."""
    base = K.config(64, 300)
    assert base == dict(block_n=2, block_k=1024, first_k=1024, num_warps=4, ahead=0)
    pick = lambda n, k: dict(first_k=128, block_k=32) if n == 64 else None  # noqa: E731
    with K.configured(pick):
        assert K.config(64, 300) == dict(block_n=2, block_k=32, first_k=128, num_warps=4, ahead=0)
        assert K.config(32, 300) == base
        x, w = inputs(1, 64, 300, torch.float32, 13)
        torch.testing.assert_close(K.gemv(x, w), x @ w.T, rtol=1e-5, atol=1e-5)
    assert K.config(64, 300) == base
    with pytest.raises(ValueError, match="first_k must be a power of two, got 96"):
        with K.configured(lambda n, k: dict(first_k=96)):
            K.gemv(*inputs(1, 8, 96, torch.float32))
    assert K.config(64, 300) == base


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gelu_mul_epilogue_with_a_wide_first_chunk(dtype):
    """Paired halves each read their first chunk before the wait: the GEMV at the same chunks, then the kernel. Bit-equal
    in the interpreter and in bf16; in fp32 on the H200 the two differed in the last bits (the two kernels' partial
    sums compile differently: bench/results/h200/gemv_first/S/gpu_tests_gemv.log), so there within 1e-6 (not yet
    run on the GPU)."""
    x, w = inputs(1, 2 * 13, 100, dtype, 14)
    got = K.gemv_gelu_mul(x * 8, w, block_n=4, block_k=16, first_k=64)
    from kselect.kernels.gelu_mul import gelu_tanh_mul_packed

    want = gelu_tanh_mul_packed(K.gemv(x * 8, w, block_n=4, block_k=16, first_k=64))
    if DEV == "cuda" and dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    else:
        assert torch.equal(got, want)


# ---------------------------------------------------------------------------- GeGLU in the epilogue
def unfused_gelu_mul(x, w, mul, bn, bk):
    from kselect.kernels.gelu_mul import gelu_tanh_mul, gelu_tanh_mul_packed

    y = K.gemv(x, w, block_n=bn, block_k=bk)
    return gelu_tanh_mul_packed(y) if mul is None else gelu_tanh_mul(y, mul)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,i,k,bn,bk", [(1, 24, 100, 4, 32), (2, 13, 64, 8, 64)])
def test_gelu_mul_epilogue_equals_gemv_then_kernel(dtype, m, i, k, bn, bk):
    """[Wg; Wu] paired in one program: bit-equal to the GEMV's [M, 2I] then kernels/gelu_mul (both halves
    rounded to the dtype first, as the GEMV stores them), at ragged edges."""
    x, w = inputs(m, 2 * i, k, dtype, 5)
    x = x * 8  # gelu's both tails
    got = K.gemv_gelu_mul(x, w, block_n=bn, block_k=bk)
    assert got.shape == (m, i) and got.dtype == dtype
    assert torch.equal(got, unfused_gelu_mul(x, w, None, bn, bk))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,i,k,bn,bk,fk", [(1, 24, 100, 4, 32, 32), (2, 13, 64, 8, 16, 64), (1, 9, 300, 2, 64, 128),
                                           (1, 24, 300, 4, 64, 16)])
def test_gelu_mul_paired_in_one_loop_equals_a_loop_each(dtype, m, i, k, bn, bk, fk):
    """PAIR_ONE_LOOP (the gate's and the up's chunks in one K loop): each half's sums in _row_dots's order, so the
    bits of a loop each, with a first chunk as wide as a chunk, wider or narrower, and ragged edges; off outside its
    block; AHEAD keeps a loop each."""
    x, w = inputs(m, 2 * i, k, dtype, 15)
    x = x * 8
    given = dict(block_n=bn, block_k=bk, first_k=fk)
    want = K.gemv_gelu_mul(x, w, **given)
    with K.pair_one_loop(True):
        assert K.PAIR_ONE_LOOP
        got = K.gemv_gelu_mul(x, w, **given)
        ahead = K.gemv_gelu_mul(x, w, ahead=1, **given)
    assert not K.PAIR_ONE_LOOP
    assert torch.equal(got, want) and torch.equal(ahead, K.gemv_gelu_mul(x, w, ahead=1, **given))


def test_gelu_mul_pair_in_one_loop_by_default_on_the_cards_that_measured_it(monkeypatch):
    """PAIR_ONE_LOOP None: one loop on the cards of PAIR_ONE_LOOP_CARDS (the H100), a loop each elsewhere; set, it
    wins over the card."""
    x = torch.zeros(1, 8)
    assert K.PAIR_ONE_LOOP is None and not K._one_loop(x)  # off the GPU
    monkeypatch.setattr(K, "card_of", lambda t: "NVIDIA H100 80GB HBM3")
    assert K._one_loop(x)
    with K.pair_one_loop(False):
        assert not K._one_loop(x)
    monkeypatch.setattr(K, "card_of", lambda t: "NVIDIA H200")
    assert not K._one_loop(x)
    with K.pair_one_loop(True):
        assert K._one_loop(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gelu_mul_epilogue_with_a_strided_multiplier(dtype):
    """gelu(x @ W.T) * mul, mul a strided view (the per-layer input of one layer, ple[:, i])."""
    x, w = inputs(1, 20, 96, dtype, 6)
    ple = torch.randn(1, 3, 20, generator=torch.Generator().manual_seed(7)).to(DEV, dtype)[:, 1]
    got = K.gemv_gelu_mul(x * 8, w, ple, block_n=4, block_k=32)
    assert torch.equal(got, unfused_gelu_mul(x * 8, w, ple, 4, 32))


def test_gelu_mul_epilogue_bad_inputs():
    x = torch.zeros(1, 8, device=DEV)
    with pytest.raises(ValueError, match="even row count"):
        K.gemv_gelu_mul(x, torch.zeros(5, 8, device=DEV))
    with pytest.raises(ValueError, match=r"mul \[1, 4\]"):
        K.gemv_gelu_mul(x, torch.zeros(4, 8, device=DEV), torch.zeros(1, 5, device=DEV))
    with pytest.raises(ValueError, match="1 to 8 rows"):
        K.gemv_gelu_mul(torch.zeros(9, 8, device=DEV), torch.zeros(4, 8, device=DEV))


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("i,k", [(10240, 2560), (21504, 5376)])  # E4B and 31B gate/up
def test_gelu_mul_epilogue_gemma_sizes_bf16(i, k):
    """Default configs (a program owns half the rows of each half): the same values as the GEMV over [2I, K]
    then the kernel, up to the fp32 reduction layout flipping a rounding."""
    from fused_helpers import ulp_close

    x, w = inputs(1, 2 * i, k, torch.bfloat16, 8)
    ulp_close(K.gemv_gelu_mul(x, w), unfused_gelu_mul(x, w, None, None, None), torch.bfloat16, max_frac=0.02)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_gelu_mul_paired_in_one_loop_at_gemma_sizes_bf16():
    """E4B's batch-1 gate/up at the default config with both halves in one K loop (PAIR_ONE_LOOP): the bits of a loop
    each, plain and in a PDL chain."""
    x, w = inputs(1, 2 * 10240, 2560, torch.bfloat16, 19)
    want = K.gemv_gelu_mul(x, w)
    with K.pair_one_loop(True):
        assert torch.equal(K.gemv_gelu_mul(x, w), want)
        down = inputs(1, 2560, 10240, torch.bfloat16, 20)[1]
        chained = pdl_chains(lambda y, d: K.gemv(K.gemv_gelu_mul(y, w), d), x, down, steps=6)
    assert torch.equal(chained["pdl"], chained["plain"])


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_softcap_and_scale_epilogues_at_gemma_sizes_bf16():
    """E4B's LM head with Gemma's softcap of 30, and the per-layer-input projection with its 2560^-0.5 scale: the
    epilogue gives the bits of the PyTorch ops after the same GEMV (what the unfused compute_logits does)."""
    x, w = inputs(1, 262144, 2560, torch.bfloat16, 17)
    assert torch.equal(K.gemv(x, w, softcap=30.0), torch.tanh(K.gemv(x, w) / 30.0) * 30.0)
    x, w = inputs(1, 10752, 2560, torch.bfloat16, 18)
    assert torch.equal(K.gemv(x, w, scale=2560**-0.5), K.gemv(x, w) * 2560**-0.5)


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
def test_pdl_launch_equals_plain_launch():
    """With programmatic dependent launch (SM90) a chain of GEMVs, each reading the last one's output, gives the
    bits of the plain launches: every kernel waits for the one before it before reading x; with PDL's early release
    (each GEMV releases the next before it waits) too."""
    x, w = inputs(1, 2560, 2560, torch.bfloat16, 9)
    got = pdl_chains(K.gemv, x, w)
    assert torch.equal(got["pdl"], got["plain"]) and torch.equal(got["early"], got["plain"])


def test_w_prefetch_switch_and_lines(monkeypatch):
    """PREFETCH_W K chunks after the first, in 128-byte lines a row, asked of L2 before the PDL wait: none when the
    switch is off, the launch is plain or the interpreter runs it; the switch refuses other counts, is restored after
    its block, and inside it the interpreter's sums are the same."""
    from kselect.kernels import pdl

    from kselect.kernels.l2_prefetch import w_lines

    gpu_x = type("X", (), {"is_cuda": True, "element_size": lambda self: 2})()
    on, plain = {"PDL": True, "launch_pdl": True}, {"PDL": False}
    assert w_lines(K.PREFETCH_W, on, gpu_x, 256) == dict(W_LINES=0, LINE=64)
    x, w = inputs(1, 40, 700, torch.float32, 4)
    want = K.gemv(x, w, block_n=8, block_k=128)
    with K.prefetch_w(2):
        assert K.PREFETCH_W == 2
        assert w_lines(K.PREFETCH_W, on, gpu_x, 256) == dict(W_LINES=8, LINE=64)  # two 512-byte chunks
        assert w_lines(2, plain, gpu_x, 256)["W_LINES"] == 0 and w_lines(2, on, x, 256)["W_LINES"] == 0
        monkeypatch.setattr(pdl, "args", lambda t: {"PDL": False})
        assert torch.equal(K.gemv(x, w, block_n=8, block_k=128), want)
    assert K.PREFETCH_W == 0
    for bad in (3, True, 2.0):
        with pytest.raises(ValueError, match="gemv prefetch_w takes 0, 1, 2 or 4 K tiles"):
            K.prefetch_w(bad)


def test_both_gemv_launches_take_the_switchs_chunks(monkeypatch):
    """gemv and gemv_gelu_mul launch with PREFETCH_W's lines (kselect's gemv_w_l2 variants measure nothing if a
    launch drops them); here the interpreter's launch, whose lines are then none."""
    from kselect.kernels import l2_prefetch

    asked = []
    monkeypatch.setattr(K, "w_lines", lambda tiles, *a: asked.append(tiles) or l2_prefetch.w_lines(tiles, *a))
    x, w = inputs(1, 32, 300, torch.float32, 6)
    with K.prefetch_w(4):
        K.gemv(x, w, block_n=8, block_k=128)
        K.gemv_gelu_mul(x, torch.cat([w, w]), block_k=128)
    assert asked == [4, 4]


@gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("chunks", [2, 4])
def test_w_prefetch_under_pdl_equals_plain_launches(chunks):
    """With the chunks after the first asked of L2 before each PDL wait, a chain of GEMVs and of paired GeGLU
    projections gives the plain launches' bits (a prefetch reads weights only and changes nothing)."""
    x, w = inputs(1, 2560, 2560, torch.bfloat16, 9)
    gu = inputs(1, 2 * 2560, 2560, torch.bfloat16, 10)[1]
    with K.prefetch_w(chunks):
        got = pdl_chains(lambda y, w: K.gemv(y, w, block_n=8, block_k=256), x, w)
        assert torch.equal(got["pdl"], got["plain"]) and torch.equal(got["early"], got["plain"])
        paired = pdl_chains(lambda y, w: K.gemv_gelu_mul(y, gu) + y, x, w, steps=10)
        assert torch.equal(paired["pdl"], paired["plain"])
