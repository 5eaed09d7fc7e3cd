"""y = x @ W.T for a few rows of x (decode): one Triton kernel that streams W once.

Why: at batch 1 the decode step is weight reads, and E4B's per-layer projections are small (q/k/v 15.7 MB,
o 10.5 MB): cuBLAS ran them at 2.9 TB/s in the fused step (bench/results/h200/fusion/README.md).
Each program owns BLOCK_N rows of W and walks K in BLOCK_K chunks, keeping a [BLOCK_N, BLOCK_K] fp32
partial per row of x and reducing it once at the end; x is re-read from L2. The result is rounded once
to the output dtype (to nearest, kernels/triton_round.py), as cuBLAS rounds its fp32 accumulator.
On SM90 it launches with PDL where the caller asks for it (kernels/pdl.py), and reads the first K chunk of W
before waiting; with PREFETCH_W (a measurement's switch, off by default) it also asks L2 for that many chunks after
it (kernels/l2_prefetch.py rows_to_l2: no registers hold them). E4B's batch-1 step on the H100: 0.878x with two, the
hints slowing the latency-bound kernels beside them (bench/results/h100/w_l2/).

gemv_gelu_mul is GeGLU's projection with its middle in the epilogue: gelu_tanh(x @ Wg.T) * (x @ Wu.T) from the
concatenated [Wg; Wu] (a program owns the same rows of both halves), or gelu_tanh(x @ W.T) * mul (the per-layer
input gate). Both halves are rounded to the output dtype first, as the unfused GEMV then kernels/gelu_mul.py
round: at the same block sizes it equals them bit for bit (one kernel and one [M, 2I] round trip a call fewer).
Paired, a program reads its gate rows' K loop, then its up rows'; PAIR_ONE_LOOP (on the H100 by default) reads both
halves' chunks in one loop (twice the loads in flight a program), the same sums in the same order.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import pdl, w_evict
from .pdl import wait_then_release
from .cards import card_of
from .shape_override import ShapeOverride
from .switches import switched
from .add_norm_prologue import AddNorm, plain_args, stats, x_chunk
from .add_norm_tail import MAX_N, MAXNREG_ONE_ROW, AddNormTail, add_norm_tail, no_tail_args
from .rms_norm import scalar_value
from .gelu_mul import gelu_mul_rounded, tanh_f32
from .l2_prefetch import rows_to_l2, tiles_switch, w_lines
from .triton_round import round_like
from .w_evict import load_w

MAX_ROWS = 8  # more rows of x: a GEMM kernel (tensor cores) is the right tool
PREFETCH_W = 0  # K chunks of W after the first a PDL-launched program asks L2 for before its wait (0: none)
# PAIR_ONE_LOOP: the paired GeGLU projection reads its gate's and its up's chunks in one K loop, not a loop each.
# None (the default): on the cards of PAIR_ONE_LOOP_CARDS. On the H100, E4B's batch-1 step gained 1.014x with it alone
# (a tie) and 1.028x with kernels/triton_paged.py's PDL_DECODE_BY_CARD switches (bench/results/h100/pair1/).
PAIR_ONE_LOOP = None
PAIR_ONE_LOOP_CARDS = {"NVIDIA H100 80GB HBM3"}


def prefetch_w(chunks: int):
    """PREFETCH_W = chunks inside (0, 1, 2 or 4; a CUDA graph captured inside keeps it)."""
    return tiles_switch(globals(), "gemv", chunks)


def pair_one_loop(on: bool):
    """PAIR_ONE_LOOP inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), PAIR_ONE_LOOP=bool(on))


def _one_loop(x: torch.Tensor) -> bool:
    return PAIR_ONE_LOOP if PAIR_ONE_LOOP is not None else card_of(x) in PAIR_ONE_LOOP_CARDS


@triton.jit
def _first_chunk(w_rows, row_ok, k, FIRST_K: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """W's first FIRST_K columns of a program's rows, in fp32: read before the PDL wait (kernels/pdl.py: weights
    only). A wider first chunk would move more of the weight read into the previous kernel's tail; it measured slower
    (bench/results/h200/gemv_first/; on the H100, bench/results/h100/first_chunk/), so `config` keeps one K chunk."""
    c0 = tl.arange(0, FIRST_K)
    return load_w(w_rows + c0[None, :], row_ok[:, None] & (c0 < k)[None, :], EVICT_FIRST).to(tl.float32)


@triton.jit
def _row_dots(x_row, w_rows, w0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, ref_ptr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              FIRST_K: tl.constexpr, PRENORM: tl.constexpr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr,
              HAS_WB: tl.constexpr, AHEAD: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """fp32 dots of one row of x with a program's rows of W (first chunk w0 already read), reduced once per
    accumulator: one when the first chunk is a BLOCK_K chunk, else the first chunk's and the rest's. Where PRENORM,
    x is rebuilt chunk by chunk from the add-norm prologue's row state (res_row .. rstd_s, _row_stats).
    AHEAD: W's loads run one chunk ahead of the multiplies (the same sums in the same order). Off: E4B's batch-1 step
    decoded 0.945x with it on the H100, and no shape's fastest config had it (bench/results/h100/kselect_triton/)."""
    c0 = tl.arange(0, FIRST_K)
    acc0 = w0 * x_chunk(x_row, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, c0, c0 < k, ref_ptr, PRENORM, HAS_WA,
                        HAS_SCALAR, HAS_WB)[None, :]
    cols = tl.arange(0, BLOCK_K)
    if FIRST_K == BLOCK_K:
        acc = acc0
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    if AHEAD:  # the next chunk's load issued before this chunk's multiply: two chunks in flight a program
        w_next = load_w(w_rows + (FIRST_K + cols)[None, :], row_ok[:, None] & (FIRST_K + cols < k)[None, :],
                        EVICT_FIRST)
    for k0 in range(FIRST_K, k, BLOCK_K):
        c = k0 + cols
        c_ok = c < k
        if AHEAD:
            w = w_next
            w_next = load_w(w_rows + (c + BLOCK_K)[None, :], row_ok[:, None] & (c + BLOCK_K < k)[None, :],
                            EVICT_FIRST)
        else:
            w = load_w(w_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        acc += w.to(tl.float32) * x_chunk(x_row, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, c, c_ok, ref_ptr,
                                          PRENORM, HAS_WA, HAS_SCALAR, HAS_WB)[None, :]
    if FIRST_K == BLOCK_K:
        return tl.sum(acc, axis=1)
    return tl.sum(acc0, axis=1) + tl.sum(acc, axis=1)


@triton.jit
def _pair_row_dots(x_row, g_rows, u_rows, g0, u0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, ref_ptr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FIRST_K: tl.constexpr, PRENORM: tl.constexpr,
                   HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr, HAS_WB: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """_row_dots (without AHEAD) of the gate's and the up's rows in one K loop: both halves' chunks in flight
    together, x's chunk made once. Each half's sums are _row_dots's, in its order, so the dots are the same."""
    c0 = tl.arange(0, FIRST_K)
    x0 = x_chunk(x_row, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, c0, c0 < k, ref_ptr, PRENORM, HAS_WA,
                 HAS_SCALAR, HAS_WB)[None, :]
    g_acc0 = g0 * x0
    u_acc0 = u0 * x0
    cols = tl.arange(0, BLOCK_K)
    if FIRST_K == BLOCK_K:
        g_acc = g_acc0
        u_acc = u_acc0
    else:
        g_acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        u_acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(FIRST_K, k, BLOCK_K):
        c = k0 + cols
        c_ok = c < k
        g = load_w(g_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        u = load_w(u_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        xc = x_chunk(x_row, res_row, wa_ptr, wb_ptr, scal, rstd_y, rstd_s, c, c_ok, ref_ptr, PRENORM, HAS_WA,
                     HAS_SCALAR, HAS_WB)[None, :]
        g_acc += g.to(tl.float32) * xc
        u_acc += u.to(tl.float32) * xc
    if FIRST_K == BLOCK_K:
        return tl.sum(g_acc, axis=1), tl.sum(u_acc, axis=1)
    return tl.sum(g_acc0, axis=1) + tl.sum(g_acc, axis=1), tl.sum(u_acc0, axis=1) + tl.sum(u_acc, axis=1)


@triton.jit
def _row_stats(y_row, res_row, wa_ptr, scalar, s_row, eps, k, ref_ptr, PRENORM: tl.constexpr, HAS_WA: tl.constexpr,
               HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr, HAS_WB: tl.constexpr, K_PAD: tl.constexpr):
    """(scalar, rstd of y, rstd of s) of one row for _row_dots: the add-norm's two norms, s written by program 0,
    where PRENORM; ones otherwise."""
    scal = 1.0
    rstd_y = 1.0
    rstd_s = 1.0
    if PRENORM:
        scal = scalar_value(scalar, SCALAR_PTR)
        rstd_y, rstd_s = stats(y_row, res_row, wa_ptr, scal, s_row, k, eps, tl.where(tl.program_id(0) == 0, k, 0), ref_ptr, K_PAD,
                               HAS_WA, HAS_SCALAR, HAS_WB)
    return scal, rstd_y, rstd_s


@triton.jit
def epilogue(dots, out_ptr, scale, inv_cap, cap, HAS_SCALE: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
             EXACT_TANH: tl.constexpr):
    """fp32 dots rounded to out_ptr's dtype as cuBLAS rounds its accumulator, then `* scale` and the logit softcap,
    each rounded as the PyTorch op after the projection rounds it (kernels/skinny_gemm.py uses it too)."""
    y = round_like(dots, out_ptr)
    if HAS_SCALE:  # y * scale, rounded as PyTorch's multiply by a Python float rounds it
        y = round_like(y * scale, out_ptr)
    if HAS_SOFTCAP:  # tanh(y / cap) * cap as CUDA PyTorch computes it: / a scalar is * its fp32 reciprocal
        t = round_like(tanh_f32(round_like(y * inv_cap, out_ptr), EXACT_TANH), out_ptr)
        y = round_like(t * cap, out_ptr)
    return y


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, out_ptr, n, k, stride_x, stride_w, stride_out, scale, inv_cap, cap, res_ptr, wa_ptr, wb_ptr, scalar, s_ptr, stride_res, stride_s, eps,
                 M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FIRST_K: tl.constexpr,
                 HAS_SCALE: tl.constexpr, HAS_SOFTCAP: tl.constexpr, EXACT_TANH: tl.constexpr, PDL: tl.constexpr,
                 PRENORM: tl.constexpr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr,
                 HAS_WB: tl.constexpr, K_PAD: tl.constexpr, AHEAD: tl.constexpr,
                 cnt_ptr, t_res, t_wa, t_wb, t_scalar, t_s, t_n, stride_tres, stride_ts, stride_tn, t_eps,
                 TAIL: tl.constexpr, T_HAS_WA: tl.constexpr, T_HAS_SCALAR: tl.constexpr, T_SCALAR_PTR: tl.constexpr,
                 T_HAS_WB: tl.constexpr, N_PAD: tl.constexpr, W_LINES: tl.constexpr = 0, LINE: tl.constexpr = 64,
                 EVICT_FIRST: tl.constexpr = False):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * stride_w
    rows_to_l2(w_rows + FIRST_K, row_ok, k - FIRST_K, w_ptr, W_LINES, LINE)  # the chunks after the first, into L2
    w0 = _first_chunk(w_rows, row_ok, k, FIRST_K, EVICT_FIRST)
    wait_then_release(PDL)
    for m in tl.static_range(M):
        x_row, res_row = x_ptr + m * stride_x, res_ptr + m * stride_res
        scal, ry, rs = _row_stats(x_row, res_row, wa_ptr, scalar, s_ptr + m * stride_s, eps, k, out_ptr, PRENORM,
                                  HAS_WA, HAS_SCALAR, SCALAR_PTR, HAS_WB, K_PAD)
        dots = _row_dots(x_row, w_rows, w0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, ry, rs, out_ptr, BLOCK_N,
                         BLOCK_K, FIRST_K, PRENORM, HAS_WA, HAS_SCALAR, HAS_WB, AHEAD, EVICT_FIRST)
        y = epilogue(dots, out_ptr, scale, inv_cap, cap, HAS_SCALE, HAS_SOFTCAP, EXACT_TANH)
        tl.store(out_ptr + m * stride_out + rows, y.to(out_ptr.dtype.element_ty), mask=row_ok)
    if TAIL:  # the add-norm after the projection, in its last program (kernels/add_norm_tail.py)
        add_norm_tail(out_ptr, stride_out, n, cnt_ptr, t_res, t_wa, t_wb, t_scalar, t_s, t_n, stride_tres, stride_ts,
                      stride_tn, t_eps, M, N_PAD, T_HAS_WA, T_HAS_SCALAR, T_SCALAR_PTR, T_HAS_WB)


@triton.jit
def _gemv_gelu_mul_kernel(x_ptr, w_ptr, mul_ptr, out_ptr, n, k, up_row, stride_x, stride_w, stride_mul, stride_out,
                          res_ptr, wa_ptr, wb_ptr, scalar, s_ptr, stride_res, stride_s, eps, M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, FIRST_K: tl.constexpr, PAIRED: tl.constexpr, PDL: tl.constexpr,
                          PRENORM: tl.constexpr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr,
                          HAS_WB: tl.constexpr, K_PAD: tl.constexpr, AHEAD: tl.constexpr,
                          ONE_LOOP: tl.constexpr = False, W_LINES: tl.constexpr = 0, LINE: tl.constexpr = 64,
                          EVICT_FIRST: tl.constexpr = False):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    g_rows = w_ptr + rows.to(tl.int64)[:, None] * stride_w
    rows_to_l2(g_rows + FIRST_K, row_ok, k - FIRST_K, w_ptr, W_LINES, LINE)
    g0 = _first_chunk(g_rows, row_ok, k, FIRST_K, EVICT_FIRST)
    if PAIRED:
        u_rows = w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w
        rows_to_l2(u_rows + FIRST_K, row_ok, k - FIRST_K, w_ptr, W_LINES, LINE)
        u0 = _first_chunk(u_rows, row_ok, k, FIRST_K, EVICT_FIRST)
    wait_then_release(PDL)
    for m in tl.static_range(M):
        x_row, res_row = x_ptr + m * stride_x, res_ptr + m * stride_res
        scal, ry, rs = _row_stats(x_row, res_row, wa_ptr, scalar, s_ptr + m * stride_s, eps, k, out_ptr, PRENORM,
                                  HAS_WA, HAS_SCALAR, SCALAR_PTR, HAS_WB, K_PAD)
        if ONE_LOOP:  # PAIRED, without AHEAD
            g, u = _pair_row_dots(x_row, g_rows, u_rows, g0, u0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, ry, rs,
                                  out_ptr, BLOCK_N, BLOCK_K, FIRST_K, PRENORM, HAS_WA, HAS_SCALAR, HAS_WB,
                                  EVICT_FIRST)
            g = round_like(g, out_ptr)
            u = round_like(u, out_ptr)
        else:
            g = round_like(_row_dots(x_row, g_rows, g0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, ry, rs, out_ptr,
                                     BLOCK_N, BLOCK_K, FIRST_K, PRENORM, HAS_WA, HAS_SCALAR, HAS_WB, AHEAD,
                                     EVICT_FIRST), out_ptr)
            if PAIRED:
                u = round_like(_row_dots(x_row, u_rows, u0, row_ok, k, res_row, wa_ptr, wb_ptr, scal, ry, rs,
                                         out_ptr, BLOCK_N, BLOCK_K, FIRST_K, PRENORM, HAS_WA, HAS_SCALAR, HAS_WB,
                                         AHEAD, EVICT_FIRST), out_ptr)
            else:
                u = tl.load(mul_ptr + m * stride_mul + rows, mask=row_ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + m * stride_out + rows, gelu_mul_rounded(g, u, out_ptr).to(out_ptr.dtype.element_ty),
                 mask=row_ok)


_override = ShapeOverride()
configured = _override.configured  # `with configured(fn)`: fn(n, k)'s entries replace config's (benchmarks' variants)


def config(n: int, k: int) -> dict:
    """Launch parameters by shape, the fastest measured per Gemma-4 projection on the H200
    (bench/results/h200/prefill_gemv/G/gemv.md): two rows of W a program over long K chunks for the small projections
    (more programs in flight), eight rows over 256 columns for the wide ones (N >= 16384) and for K <= 256. The first
    chunk (read before a PDL wait) is one K chunk. Inside `configured(fn)`, fn(n, k)'s entries replace these."""
    return _override.apply(base_config(n, k), n, k)


def base_config(n: int, k: int) -> dict:
    """`config`'s rule, without a `configured` block's entries (a measurement's variants start from it)."""
    cfg = dict(block_n=8, block_k=256) if n >= 16384 or k <= 256 else dict(block_n=2, block_k=1024)
    cfg.update(first_k=cfg["block_k"], num_warps=4, ahead=0)
    return cfg


def _launch_params(n: int, k: int, given: dict) -> dict:
    """config(n, k) with the caller's explicit entries (None: not given); an explicit block_k without first_k also
    sets the first chunk (one K chunk, as before first_k existed)."""
    cfg = config(n, k)
    given = {key: v for key, v in given.items() if v is not None}
    if "block_k" in given and "first_k" not in given:
        given["first_k"] = given["block_k"]
    cfg.update(given)
    for key in ("block_n", "block_k", "first_k"):
        v = cfg[key]
        if v < 1 or v & (v - 1):
            raise ValueError(f"gemv {key} must be a power of two, got {v}")
    if cfg["ahead"] not in (0, 1, False, True):
        raise ValueError(f"gemv ahead must be 0 or 1, got {cfg['ahead']!r}")
    return cfg


def check_operands(name: str, x: torch.Tensor, w: torch.Tensor, max_rows: int = MAX_ROWS) -> None:
    """x [M, K] with 1 <= M <= max_rows and w [N, K], both with unit column stride (kernels/skinny_gemm.py too)."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1] or x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError(f"{name} needs x [M, K] and w [N, K] with unit column stride, got {tuple(x.shape)} "
                         f"stride {x.stride()} and {tuple(w.shape)} stride {w.stride()}")
    if not 0 < x.shape[0] <= max_rows:
        raise ValueError(f"{name} takes 1 to {max_rows} rows of x, got {x.shape[0]}")


@functools.lru_cache(maxsize=16)
def fp32_cap(softcap: float) -> tuple[float, float]:
    """(1 / cap, cap) in fp32, as CUDA PyTorch's `/ cap` uses them; once per cap value, not per decode-step call."""
    cap = torch.tensor(softcap, dtype=torch.float32)
    return float(1.0 / cap), float(cap)


def _operand(name: str, x, w) -> tuple[torch.Tensor, dict]:
    """(the rows the kernel reads as x, its prologue arguments): an AddNorm's y with its add-norm computed in the
    prologue (kernels/add_norm_prologue.py), or x itself."""
    if isinstance(x, AddNorm):
        check_operands(name, x.y, w)
        return x.y, x.kernel_args()
    check_operands(name, x, w)
    return x, plain_args(x)


def gemv(x: torch.Tensor | AddNorm, w: torch.Tensor, block_n: int | None = None, block_k: int | None = None,
         num_warps: int | None = None, first_k: int | None = None, scale: float | None = None,
         softcap: float | None = None, ahead: int | None = None, tail: AddNormTail | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), w [N, K] with unit column stride -> x @ w.T [M, N] in x's dtype, then in the
    epilogue `* scale` and/or `tanh(. / softcap) * softcap`, each rounded to the dtype as the PyTorch ops round
    (Gemma's per-layer-input projection scale, its final logit softcap). Launch parameters left out come from `config`.

    M > 1 re-reads W per row (from L2 for the later rows); it is meant for one to a few decode rows.
    x may be an AddNorm: the projection of its result, its s written to its `out`. tail: the add-norm of the result,
    computed by the last program into tail.s and tail.n (kernels/add_norm_tail.py); x is then a tensor."""
    if tail is not None and isinstance(x, AddNorm):
        raise ValueError("gemv takes an add-norm before the projection (x) or after it (tail), not both")
    x, pre = _operand("gemv", x, w)
    m, k = x.shape
    n = w.shape[0]
    if tail is not None and not AddNormTail.fits(tail.res, m, n):
        raise ValueError(f"gemv tail needs res [{m}, {n}] with unit column stride and at most {MAX_N} columns, got "
                         f"{tuple(tail.res.shape)} stride {tail.res.stride()}")
    p = _launch_params(n, k, dict(block_n=block_n, block_k=block_k, first_k=first_k, num_warps=num_warps, ahead=ahead))
    if softcap is not None and not softcap > 0:
        raise ValueError(f"gemv softcap must be a positive number, got {softcap}")
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    inv_cap, cap = (1.0, 1.0) if softcap is None else fp32_cap(float(softcap))
    launch = pdl.args(x)
    _gemv_kernel[(triton.cdiv(n, p["block_n"]),)](
        x, w, out, n, k, x.stride(0), w.stride(0), out.stride(0), 1.0 if scale is None else float(scale),
        inv_cap, cap, **pre, M=m, BLOCK_N=p["block_n"], BLOCK_K=p["block_k"],
        FIRST_K=p["first_k"], HAS_SCALE=scale is not None, HAS_SOFTCAP=softcap is not None, EXACT_TANH=x.is_cuda,
        AHEAD=bool(p["ahead"]), **(tail.kernel_args(out) if tail is not None else no_tail_args(out)),
        num_warps=p["num_warps"], **({"maxnreg": MAXNREG_ONE_ROW} if tail is not None and m == 1 and x.is_cuda else {}),
        **w_lines(PREFETCH_W, launch, x, p["block_k"]), EVICT_FIRST=w_evict.on(x), **launch)
    return out


def gemv_gelu_mul(x: torch.Tensor | AddNorm, w: torch.Tensor, mul: torch.Tensor | None = None, block_n: int | None = None,
                  block_k: int | None = None, num_warps: int | None = None, first_k: int | None = None,
                  ahead: int | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS) -> [M, I] in x's dtype: gelu_tanh(x @ Wg.T) * (x @ Wu.T) for w = [Wg; Wu] [2I, K]
    (mul None), or gelu_tanh(x @ w.T) * mul for w [I, K] and mul [M, I] (unit column stride).
    Launch parameters left out come from `config` of the whole w, block_n halved per half when paired (the same
    bytes a program). x may be an AddNorm, as for gemv."""
    x, pre = _operand("gemv_gelu_mul", x, w)
    m, k = x.shape
    paired = mul is None
    if paired and w.shape[0] % 2:
        raise ValueError(f"gemv_gelu_mul without mul needs w = [gate; up] with an even row count, got {w.shape[0]}")
    n = w.shape[0] // 2 if paired else w.shape[0]
    if not paired and (mul.shape != (m, n) or mul.stride(-1) != 1):
        raise ValueError(f"gemv_gelu_mul needs mul [{m}, {n}] with unit column stride, got {tuple(mul.shape)} "
                         f"stride {mul.stride()}")
    p = _launch_params(w.shape[0], k, dict(block_k=block_k, first_k=first_k, num_warps=num_warps, ahead=ahead))
    block_n = block_n or (max(1, p["block_n"] // 2) if paired else p["block_n"])
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    launch = pdl.args(x)
    _gemv_gelu_mul_kernel[(triton.cdiv(n, block_n),)](
        x, w, out if paired else mul, out, n, k, n, x.stride(0), w.stride(0), 0 if paired else mul.stride(0),
        out.stride(0), **pre, M=m, BLOCK_N=block_n, BLOCK_K=p["block_k"], FIRST_K=p["first_k"], PAIRED=paired,
        AHEAD=bool(p["ahead"]), ONE_LOOP=paired and _one_loop(x) and not p["ahead"], num_warps=p["num_warps"],
        **w_lines(PREFETCH_W, launch, x, p["block_k"]), EVICT_FIRST=w_evict.on(x), **launch)
    return out
