"""y = x @ W.T for one row of x (batch-1 decode) with W streamed by TMA: several chunks of W in flight a program.

Why: kernels/gemv.py loads W with plain loads, and Triton software-pipelines only loads that feed a `tl.dot` or
come through a tensor descriptor. So each of its programs has one chunk of W in flight, and a card's bytes in flight
are its resident programs times one chunk. On the H100 E4B's big projections then read at 85-89% of the copy rate
(bench/results/h100/kselect_triton/G/). Here W comes through a tensor descriptor (TMA on SM90) in a loop of
`stages` stages, so each program keeps up to `stages` chunks in shared memory while it multiplies one. The first
chunk is read before the PDL wait (weights only, kernels/pdl.py). x is read after the wait.

The sums run as kernels/gemv.py's with its first chunk of one block: an fp32 [BLOCK_N, BLOCK_K] partial, chunk by
chunk in K order, reduced once and rounded once. At the same block sizes it gives gemv's bits. The descriptor zero-fills
rows and columns past W's edge, as gemv's masks do. The epilogues (`* scale`, the logit softcap, GELU*up) are gemv's.

TMA needs W's row stride in 16-byte units and a box of at most 256 elements a side (`fits`). Measured slower on the
H100: every E4B shape in the microbenchmark, and the batch-1 step at 0.86x (0.89x with its fastest configs;
bench/results/h100/gemv_tma/). gemma4/fused.py keeps it off (GEMV_TMA); the variants `tma`, `tma_tuned` measure it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from . import pdl
from .gelu_mul import gelu_mul_rounded
from .gemv import check_operands, epilogue, fp32_cap
from .pdl import wait_then_release
from .shape_override import ShapeOverride
from .triton_round import round_like

MAX_BOX = 256  # TMA's largest box side, in elements


@triton.jit
def _dots(w_desc, r0, x_ptr, k, w0, x0, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    """fp32 dots of x with a program's rows of W from row r0: the first chunk (w0 * x0) then the rest, pipelined."""
    cols = tl.arange(0, BLOCK_K)
    acc = w0.to(tl.float32) * x0[None, :]
    for k0 in tl.range(BLOCK_K, k, BLOCK_K, num_stages=STAGES):
        c = k0 + cols
        x = tl.load(x_ptr + c, mask=c < k, other=0.0).to(tl.float32)
        acc += w_desc.load([r0, k0]).to(tl.float32) * x[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def _gemv_tma_kernel(x_ptr, w_desc, mul_ptr, out_ptr, n, k, up_row, scale, inv_cap, cap, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, STAGES: tl.constexpr, GELU: tl.constexpr, PAIRED: tl.constexpr,
                     HAS_SCALE: tl.constexpr, HAS_SOFTCAP: tl.constexpr, EXACT_TANH: tl.constexpr, PDL: tl.constexpr):
    r0 = tl.program_id(0) * BLOCK_N
    rows = r0 + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    w0 = w_desc.load([r0, 0])
    if PAIRED:
        u0 = w_desc.load([r0 + up_row, 0])
    wait_then_release(PDL)
    cols = tl.arange(0, BLOCK_K)
    x0 = tl.load(x_ptr + cols, mask=cols < k, other=0.0).to(tl.float32)
    dots = _dots(w_desc, r0, x_ptr, k, w0, x0, BLOCK_K, STAGES)
    if GELU:
        g = round_like(dots, out_ptr)
        if PAIRED:
            u = round_like(_dots(w_desc, r0 + up_row, x_ptr, k, u0, x0, BLOCK_K, STAGES), out_ptr)
        else:
            u = tl.load(mul_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        y = gelu_mul_rounded(g, u, out_ptr)
    else:
        y = epilogue(dots, out_ptr, scale, inv_cap, cap, HAS_SCALE, HAS_SOFTCAP, EXACT_TANH)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=row_ok)


_override = ShapeOverride()
configured = _override.configured  # `with configured(fn)`: fn(n, k)'s entries replace config's (benchmarks' variants)


def config(n: int, k: int) -> dict:
    """Launch parameters by shape: eight rows of W a program over 256-column chunks, four stages (three chunks ahead);
    the H100's fastest per shape are in bench/results/h100/gemv_tma/G/. Inside `configured(fn)`, fn(n, k)'s entries replace these."""
    return _override.apply(dict(block_n=8, block_k=256, stages=4, num_warps=4), n, k)


def fits(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether this kernel takes x @ w.T: one row of x, W's row stride a multiple of 16 bytes, W 16-byte aligned."""
    return (x.dim() == 2 and x.shape[0] == 1 and w.dim() == 2 and w.stride(1) == 1
            and (w.stride(0) * w.element_size()) % 16 == 0 and w.data_ptr() % 16 == 0)


def _params(n: int, k: int, given: dict) -> dict:
    p = config(n, k)
    p.update({key: v for key, v in given.items() if v is not None})
    for key in ("block_n", "block_k"):
        v = p[key]
        if not 1 <= v <= MAX_BOX or v & (v - 1):
            raise ValueError(f"gemv_tma {key} must be a power of two from 1 to {MAX_BOX} (a TMA box side), got {v}")
    if not 1 <= p["stages"] <= 8:
        raise ValueError(f"gemv_tma stages must be from 1 to 8, got {p['stages']}")
    return p


def _launch(x, w, mul, n, up_row, gelu, paired, scale, softcap, p):
    if not fits(x, w):
        raise ValueError(f"gemv_tma needs x [1, K] and w [N, K] with unit column stride, a row stride of a multiple "
                         f"of 16 bytes and a 16-byte aligned start, got {tuple(x.shape)} and {tuple(w.shape)} stride "
                         f"{w.stride()}")
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    inv_cap, cap = (1.0, 1.0) if softcap is None else fp32_cap(float(softcap))
    desc = TensorDescriptor.from_tensor(w, [p["block_n"], p["block_k"]])
    _gemv_tma_kernel[(triton.cdiv(n, p["block_n"]),)](
        x, desc, out if mul is None else mul, out, n, x.shape[1], up_row, 1.0 if scale is None else float(scale),
        inv_cap, cap, BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], STAGES=p["stages"], GELU=gelu, PAIRED=paired,
        HAS_SCALE=scale is not None, HAS_SOFTCAP=softcap is not None, EXACT_TANH=x.is_cuda,
        num_warps=p["num_warps"], **pdl.args(x))
    return out


def gemv_tma(x: torch.Tensor, w: torch.Tensor, block_n: int | None = None, block_k: int | None = None,
             stages: int | None = None, num_warps: int | None = None, scale: float | None = None,
             softcap: float | None = None) -> torch.Tensor:
    """kernels/gemv.py's gemv for one row of x (`fits`), W through TMA: x @ w.T [1, N], then `* scale` and/or the
    logit softcap, rounded as gemv rounds. Launch parameters left out come from `config`."""
    check_operands("gemv_tma", x, w, max_rows=1)
    if softcap is not None and not softcap > 0:
        raise ValueError(f"gemv_tma softcap must be a positive number, got {softcap}")
    p = _params(w.shape[0], w.shape[1], dict(block_n=block_n, block_k=block_k, stages=stages, num_warps=num_warps))
    return _launch(x, w, None, w.shape[0], 0, False, False, scale, softcap, p)


def gemv_tma_gelu_mul(x: torch.Tensor, w: torch.Tensor, mul: torch.Tensor | None = None, block_n: int | None = None,
                      block_k: int | None = None, stages: int | None = None,
                      num_warps: int | None = None) -> torch.Tensor:
    """kernels/gemv.py's gemv_gelu_mul for one row of x: gelu_tanh(x @ Wg.T) * (x @ Wu.T) for w = [Wg; Wu] (mul
    None: a program reads the same rows of both halves, block_n rows of each; `config`'s block_n of the whole w is
    halved, the same bytes a program, as gemv_gelu_mul does), or gelu_tanh(x @ w.T) * mul."""
    check_operands("gemv_tma_gelu_mul", x, w, max_rows=1)
    paired = mul is None
    if paired and w.shape[0] % 2:
        raise ValueError(f"gemv_tma_gelu_mul without mul needs w = [gate; up] with an even row count, got {w.shape[0]}")
    n = w.shape[0] // 2 if paired else w.shape[0]
    if not paired and (mul.shape != (1, n) or mul.stride(-1) != 1):
        raise ValueError(f"gemv_tma_gelu_mul needs mul [1, {n}] with unit column stride, got {tuple(mul.shape)}")
    p = _params(w.shape[0], w.shape[1], dict(block_k=block_k, stages=stages, num_warps=num_warps))
    p["block_n"] = block_n or (max(1, p["block_n"] // 2) if paired else p["block_n"])
    p = _params(w.shape[0], w.shape[1], p)  # the block_n given is checked too
    return _launch(x, w, mul, n, n if paired else 0, True, paired, None, None, p)
