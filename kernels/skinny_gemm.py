"""y = x @ W.T for a few rows of x (2 to 16: a small decode batch) on tensor cores, streaming W once.

Why: at batch 16 a decode step still reads every weight once and computes little, but cuBLAS's GEMMs at 16 rows
are tiles meant for larger M, and the epilogues (the per-layer-input scale, GELU*up, the logit softcap) ran as
separate PyTorch kernels after them (gemma4/fused.py). kernels/gemv.py re-reads W for every row of x, which pays
at one row only. Here each program owns BLOCK_N rows of W and walks K in BLOCK_K tiles; x (padded to 16 rows by
masking) and the W tile meet in `tl.dot`, whose loop Triton pipelines (num_stages tiles in flight).
The accumulator is fp32, rounded once to the output dtype (to nearest, kernels/triton_round.py); the epilogues
round as the PyTorch ops after cuBLAS round (the same helpers as kernels/gemv.py).

skinny_gemm_gelu_mul is GeGLU's projection with its middle in the epilogue, as kernels/gemv.py's gemv_gelu_mul:
gelu_tanh(x @ Wg.T) * (x @ Wu.T) from the concatenated [Wg; Wu], or gelu_tanh(x @ W.T) * mul.

split_k > 1 (a config entry, 1 by default): a small N leaves SMs idle, so K is cut into ranges, each its own program,
and the tile's last program sums the fp32 partials (in split order: the same sum whatever the arrival order) before
the epilogue. At E4B's batch 16 on the H100 it measured 1.021x and 1.023x over cuBLAS (bench/results/h100/split_k/,
b16_step/); a sweep of configs since found no split faster for q/k/v, o and down (one program streaming all of K
through six 256-column stages, for down), 1.020x and 1.021x in the step (bench/results/h100/sk_tuned/): that card's
step table (skinny_step_configs.json) keeps split-K for the per-layer-input gate (256 rows of W) alone.

PREFETCH_W (None: the card's rule, PREFETCH_W_BY_CARD, else off): a call launched with PDL asks L2 for its first K
tiles of W before it waits for the kernel before it, so the loop's first loads after the wait hit L2 rather than HBM.
The one-row GEMV reads its first chunk before the wait into registers (kernels/gemv.py); the pipelined dot loop here
cannot, so this asks L2 instead (nothing held in registers), as kernels/triton_paged.py's PREFETCH_KV = L2 does.
E4B's batch-16 step on the H100 with PDL: 1.012x with two tiles, a tie (bench/results/h100/w_l2/); 1.027x, and with
the attention's batch-16 launch 1.047x, measured later (bench/results/h100/b16_rule/): the H100's rule, and the
H200's since (1.105x, bench/results/h200/b16_rule/).

swap (a config entry, False by default): each K tile is summed as W's tile times x's, [BLOCK_N, K] @ [K, 16], not
x's times W's. W's rows are then the tensor-core dot's M, so on SM90 Triton runs it on wgmma (M >= 64), W's tile
read by the tensor cores from shared memory; at M = 16 it runs mma.sync, each W tile through ldmatrix into
registers. The sums are the same products in another order, so the fp32 results differ in their last bits.

PAIR_ONE_LOOP (a measurement's switch, off by default): the paired GeGLU projection reads its gate rows' K loop, then
its up rows' (two pipelines, two ramps a program); switched on, both halves' tiles come in one loop (one pipeline,
twice the bytes a stage, x read once a tile). Each half sums its K tiles in the same order, so the bits are the same.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from . import pdl, w_evict
from .gelu_mul import gelu_mul_rounded
from .cards import card_of
from .gemv import check_operands, epilogue, fp32_cap
from .l2_prefetch import rows_to_l2, tiles_switch, w_lines
from .pdl import wait_then_release
from .shape_override import ShapeOverride
from .switches import switched
from .triton_round import round_like
from .w_evict import load_w

MAX_ROWS = 16  # one row works too (padded); more than 16 rows: a GEMM tiled for M is the right tool
PREFETCH_W = None  # K tiles of W a PDL-launched program asks L2 for before its wait (None: the card's, else none)
# On the H100 and the H200, two tiles, with PDL at 16-row steps (gemma4/fused.py PDL_TOKENS_BY_CARD) and
# triton_paged.py's SMALL_WIDE_BY_CARD: E4B's batch-16 step 1.047x and 1.045x in two calls on the H100
# (bench/results/h100/b16_rule/), 1.105x on the H200 (bench/results/h200/b16_rule/)
PREFETCH_W_BY_CARD = {"NVIDIA H100 80GB HBM3": 2, "NVIDIA H200": 2}
PAIR_ONE_LOOP = False  # paired GeGLU: gate and up tiles in one K loop, not a loop each (a measurement's switch)


def prefetch_w(tiles: int):
    """PREFETCH_W = tiles inside (0, 1, 2 or 4; a CUDA graph captured inside keeps it)."""
    return tiles_switch(globals(), "skinny_gemm", tiles)


@triton.jit
def _dot_acc(xt, wt, acc, FP32: tl.constexpr):
    """acc + xt @ wt.T (either operand may be x's tile or W's). FP32: fp32 inputs, or the CPU interpreter (whose dot
    misreads bf16): fp32 products, not TF32."""
    if FP32:
        return tl.dot(xt.to(tl.float32), tl.trans(wt.to(tl.float32)), acc, input_precision="ieee")
    return tl.dot(xt, tl.trans(wt), acc)


@triton.jit
def _tile_dots(x_ptr, w_rows, row_ok, m, k, stride_x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, FP32: tl.constexpr, SWAP: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """[BLOCK_M, BLOCK_N] fp32 dots of x's rows with a program's rows of W. SWAP: summed as W's tile times x's
    (module doc), then transposed."""
    ms = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_K)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        c = k0 + cols
        c_ok = c < k
        xt = tl.load(x_ptr + ms[:, None] * stride_x + c[None, :], mask=(ms < m)[:, None] & c_ok[None, :], other=0.0)
        wt = load_w(w_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        if SWAP:
            acc = _dot_acc(wt, xt, acc, FP32)
        else:
            acc = _dot_acc(xt, wt, acc, FP32)
    if SWAP:
        acc = tl.trans(acc)
    return acc


def pair_one_loop(on: bool):
    """PAIR_ONE_LOOP inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), PAIR_ONE_LOOP=bool(on))


@triton.jit
def _pair_dots(x_ptr, g_rows, u_rows, row_ok, m, k, stride_x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, FP32: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """_tile_dots of the gate's and the up's rows in one K loop: one pipeline of both tiles, x read once a tile.
    Each accumulator sums its K tiles in the same order as _tile_dots, so the dots are the same."""
    ms = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        c = k0 + cols
        c_ok = c < k
        xt = tl.load(x_ptr + ms[:, None] * stride_x + c[None, :], mask=(ms < m)[:, None] & c_ok[None, :], other=0.0)
        gt = load_w(g_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        ut = load_w(u_rows + c[None, :], row_ok[:, None] & c_ok[None, :], EVICT_FIRST)
        acc_g = _dot_acc(xt, gt, acc_g, FP32)
        acc_u = _dot_acc(xt, ut, acc_u, FP32)
    return acc_g, acc_u


@triton.jit
def _split_sum(acc, ws_ptr, cnt_ptr, n, rows, row_ok, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr):
    """Split-K: this program's fp32 partial to the workspace [SPLIT, BLOCK_M, n]; the tile's last program to arrive
    (its counter, reset for the next call) sums the SPLIT partials in split order (the same sum whatever the arrival
    order) and returns (True, sum); the others (False, acc)."""
    ms = tl.arange(0, BLOCK_M)
    at = ms[:, None] * n + rows[None, :]
    tl.store(ws_ptr + tl.program_id(1) * BLOCK_M * n + at, acc, mask=row_ok[None, :])
    tl.debug_barrier()  # every thread's partial is written before the release below
    last = tl.atomic_add(cnt_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu") == SPLIT - 1
    if last:
        acc = tl.zeros((BLOCK_M, acc.shape[1]), dtype=tl.float32)
        for j in tl.static_range(SPLIT):
            acc += tl.load(ws_ptr + j * BLOCK_M * n + at, mask=row_ok[None, :], other=0.0, cache_modifier=".cg")
        tl.store(cnt_ptr + tl.program_id(0), 0)
    return last, acc


@triton.jit
def _split_dots(x_ptr, w_ptr, ws_ptr, cnt_ptr, rows, row_ok, m, n, k, k_split, stride_x, stride_w,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
                FP32: tl.constexpr, SWAP: tl.constexpr, EVICT_FIRST: tl.constexpr):
    """(whether this program holds the tile's whole dots, those dots): its K range's dots (all of K without split-K),
    and with split-K the sum of every range's once the tile's last program has them (_split_sum)."""
    k0 = tl.program_id(1) * k_split
    acc = _tile_dots(x_ptr + k0, w_ptr + rows.to(tl.int64)[:, None] * stride_w + k0, row_ok, m,
                     tl.minimum(k - k0, k_split), stride_x, BLOCK_M, BLOCK_N, BLOCK_K, FP32, SWAP, EVICT_FIRST)
    done = True
    if SPLIT > 1:
        done, acc = _split_sum(acc, ws_ptr, cnt_ptr, n, rows, row_ok, SPLIT, BLOCK_M)
    return done, acc


@triton.jit
def _first_tiles_to_l2(w_ptr, rows, row_ok, k, k_split, stride_w, W_LINES: tl.constexpr, LINE: tl.constexpr):
    """Before the PDL wait (weights only): this program's first W_LINES lines a row of W in its K range into L2."""
    k0 = tl.program_id(1) * k_split
    rows_to_l2(w_ptr + rows.to(tl.int64)[:, None] * stride_w + k0, row_ok, tl.minimum(k - k0, k_split), w_ptr,
               W_LINES, LINE)


@triton.jit
def _skinny_gemm_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr, m, n, k, k_split, stride_x, stride_w, stride_out,
                        scale, inv_cap, cap, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT: tl.constexpr, FP32: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                        EXACT_TANH: tl.constexpr, PDL: tl.constexpr, W_LINES: tl.constexpr = 0,
                        LINE: tl.constexpr = 64, SWAP: tl.constexpr = False, EVICT_FIRST: tl.constexpr = False):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    _first_tiles_to_l2(w_ptr, rows, row_ok, k, k_split, stride_w, W_LINES, LINE)
    wait_then_release(PDL)  # x is written by the kernel before; the loop below reads it with W
    done, acc = _split_dots(x_ptr, w_ptr, ws_ptr, cnt_ptr, rows, row_ok, m, n, k, k_split, stride_x, stride_w,
                            BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, FP32, SWAP, EVICT_FIRST)
    if done:
        y = epilogue(acc, out_ptr, scale, inv_cap, cap, HAS_SCALE, HAS_SOFTCAP, EXACT_TANH)
        ms = tl.arange(0, BLOCK_M)
        tl.store(out_ptr + ms[:, None] * stride_out + rows[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=(ms < m)[:, None] & row_ok[None, :])


@triton.jit
def _skinny_gemm_gelu_mul_kernel(x_ptr, w_ptr, mul_ptr, out_ptr, ws_ptr, cnt_ptr, m, n, k, k_split, up_row, stride_x,
                                 stride_w, stride_mul, stride_out, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, FP32: tl.constexpr, PAIRED: tl.constexpr,
                                 PDL: tl.constexpr, ONE_LOOP: tl.constexpr = False, W_LINES: tl.constexpr = 0,
                                 LINE: tl.constexpr = 64, EVICT_FIRST: tl.constexpr = False):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    _first_tiles_to_l2(w_ptr, rows, row_ok, k, k_split, stride_w, W_LINES, LINE)  # paired: the gate's, read first
    wait_then_release(PDL)
    ms = tl.arange(0, BLOCK_M)
    ok = (ms < m)[:, None] & row_ok[None, :]
    if ONE_LOOP:  # PAIRED only (no split-K): both halves' tiles in one loop
        acc, acc_u = _pair_dots(x_ptr, w_ptr + rows.to(tl.int64)[:, None] * stride_w,
                                w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w, row_ok, m, k, stride_x,
                                BLOCK_M, BLOCK_N, BLOCK_K, FP32, EVICT_FIRST)
        done = True
    else:  # split-K only with a multiplier (not PAIRED): the whole K otherwise
        done, acc = _split_dots(x_ptr, w_ptr, ws_ptr, cnt_ptr, rows, row_ok, m, n, k, k_split, stride_x, stride_w,
                                BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, FP32, False, EVICT_FIRST)
    if done:
        g = round_like(acc, out_ptr)
        if ONE_LOOP:
            u = round_like(acc_u, out_ptr)
        elif PAIRED:
            u = round_like(_tile_dots(x_ptr, w_ptr + (rows + up_row).to(tl.int64)[:, None] * stride_w, row_ok, m, k,
                                      stride_x, BLOCK_M, BLOCK_N, BLOCK_K, FP32, False, EVICT_FIRST), out_ptr)
        else:
            u = tl.load(mul_ptr + ms[:, None] * stride_mul + rows[None, :], mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + ms[:, None] * stride_out + rows[None, :],
                 gelu_mul_rounded(g, u, out_ptr).to(out_ptr.dtype.element_ty), mask=ok)


_override = ShapeOverride()
configured = _override.configured  # `with configured(fn)`: fn(n, k)'s entries replace config's (benchmarks' variants)
CARD_CONFIGS = Path(__file__).with_name("skinny_configs.json")  # written by kselect.measurement.kernels.gemv
STEP_CONFIGS = Path(__file__).with_name("skinny_step_configs.json")  # measured in a decode step; kept apart from it


@functools.lru_cache(maxsize=None)
def _card_table(card: str) -> dict:
    """{(N, K): config} of the shapes where this card's microbenchmark record measured the skinny GEMM faster than
    cuBLAS at 16 rows by more than the noise band (skinny_configs.json), then the configs the card measured faster
    inside a decode step (skinny_step_configs.json: split-K for the small projections), which win; each file names its
    records. {} elsewhere."""
    table = {}
    for path in (CARD_CONFIGS, STEP_CONFIGS):
        table.update(json.loads(path.read_text()).get(card, {}) if card != "_sources" else {})
    return {tuple(int(v) for v in shape.split("x")): cfg for shape, cfg in table.items()}


def measured_faster(t: torch.Tensor, n: int, k: int) -> bool:
    """Whether the card t lives on has a measured config for W [n, k] (faster than cuBLAS there)."""
    return (n, k) in _card_table(card_of(t))


def config(n: int, k: int, card: str = "") -> dict:
    """Launch parameters by shape: the card's measured config where it has one, else 16 rows of W a program for N up
    to 4096 (160 to 192 programs for E4B's small projections), 64 rows for the wide ones, no split-K. Inside
    `configured(fn)`, fn(n, k)'s entries replace these."""
    cfg = dict(block_n=16 if n <= 4096 else 64, block_k=128, num_warps=4, num_stages=4, split_k=1, swap=False)
    cfg.update(_card_table(card).get((n, k), {}) if card else {})
    return _override.apply(cfg, n, k)


def _params(n: int, k: int, given: dict, card: str = "", halve: bool = False) -> dict:
    """config(n, k) on `card` (halve: block_n halved, the paired GeGLU's two halves a program) with the caller's
    explicit entries."""
    cfg = config(n, k, card)
    if halve:
        cfg["block_n"] = max(16, cfg["block_n"] // 2)
    cfg.update({key: v for key, v in given.items() if v is not None})
    for key in ("block_n", "block_k"):
        v = cfg[key]
        if v < 16 or v & (v - 1):
            raise ValueError(f"skinny_gemm {key} must be a power of two of at least 16 (tensor-core tiles), got {v}")
    if not (isinstance(cfg["split_k"], int) and 1 <= cfg["split_k"] <= 64):
        raise ValueError(f"skinny_gemm split_k must be an integer from 1 to 64, got {cfg['split_k']!r}")
    if not isinstance(cfg["swap"], bool):
        raise ValueError(f"skinny_gemm swap must be True or False, got {cfg['swap']!r}")
    return cfg


# device -> int32 tile counters of split-K calls, zero between calls (each call's last programs reset theirs). One set
# a device: two split-K launches must not overlap, which holds on one stream (the engine's; under PDL a kernel
# here waits for the one before it before it touches them).
_COUNTERS: dict = {}


def _split_buffers(x: torch.Tensor, split: int, n: int, tiles: int, k: int, block_k: int):
    """(fp32 workspace, tile counters, K columns a split) for a split-K launch; (x, x, k) without one. The splits
    take whole K tiles; a split past K's end adds zeros."""
    if split == 1:
        return x, x, k
    cnt = _COUNTERS.get(x.device)
    if cnt is None or cnt.numel() < tiles:
        cnt = _COUNTERS[x.device] = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=x.device)
    ws = torch.empty(split, 16, n, dtype=torch.float32, device=x.device)
    return ws, cnt, triton.cdiv(triton.cdiv(k, split), block_k) * block_k


def _check(name: str, x: torch.Tensor, w: torch.Tensor) -> None:
    check_operands(name, x, w, MAX_ROWS)
    if x.dtype != w.dtype:
        raise ValueError(f"{name} needs x and w of one dtype, got {x.dtype} and {w.dtype}")


def prefetch_tiles(x: torch.Tensor) -> int:
    """PREFETCH_W where set, else x's card's (PREFETCH_W_BY_CARD), else 0."""
    if PREFETCH_W is not None:
        return PREFETCH_W
    return PREFETCH_W_BY_CARD.get(card_of(x), 0) if x.is_cuda else 0


def _launch(p: dict, x: torch.Tensor) -> dict:
    launch = pdl.args(x)
    return dict(BLOCK_M=16, BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], FP32=x.dtype == torch.float32 or not x.is_cuda,
                num_warps=p["num_warps"], num_stages=p["num_stages"],
                **w_lines(prefetch_tiles(x), launch, x, p["block_k"]), **launch)


def skinny_gemm(x: torch.Tensor, w: torch.Tensor, scale: float | None = None, softcap: float | None = None,
                **given) -> torch.Tensor:
    """x [M, K] (1 <= M <= 16), w [N, K] with unit column stride -> x @ w.T [M, N] in x's dtype, then `* scale`
    and/or `tanh(. / softcap) * softcap`, rounded as kernels/gemv.py's epilogue. `given`: config entries
    (block_n, block_k, num_warps, num_stages, split_k, swap) to use instead of `config`'s. split_k > 1: K in that many
    ranges, each its own program (more programs for a small N); the partials are summed in fp32, in split order, by
    the tile's last program, then rounded once."""
    _check("skinny_gemm", x, w)
    m, k = x.shape
    n = w.shape[0]
    p = _params(n, k, given, card_of(x))
    if softcap is not None and not softcap > 0:
        raise ValueError(f"skinny_gemm softcap must be a positive number, got {softcap}")
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    inv_cap, cap = (1.0, 1.0) if softcap is None else fp32_cap(float(softcap))
    tiles, split = triton.cdiv(n, p["block_n"]), p["split_k"]
    ws, cnt, k_split = _split_buffers(x, split, n, tiles, k, p["block_k"])
    _skinny_gemm_kernel[(tiles, split)](
        x, w, out, ws, cnt, m, n, k, k_split, x.stride(0), w.stride(0), out.stride(0),
        1.0 if scale is None else float(scale), inv_cap, cap, SPLIT=split, HAS_SCALE=scale is not None,
        HAS_SOFTCAP=softcap is not None, EXACT_TANH=x.is_cuda, SWAP=p["swap"], EVICT_FIRST=w_evict.on(x),
        **_launch(p, x))
    return out


def skinny_gemm_gelu_mul(x: torch.Tensor, w: torch.Tensor, mul: torch.Tensor | None = None, **given) -> torch.Tensor:
    """x [M, K] (1 <= M <= 16) -> [M, I]: gelu_tanh(x @ Wg.T) * (x @ Wu.T) for w = [Wg; Wu] [2I, K] (mul None), or
    gelu_tanh(x @ w.T) * mul for w [I, K] and mul [M, I] (unit column stride). Paired, a program owns the same
    rows of both halves, half of block_n of each (the config of the whole w's shape: the same bytes a program)."""
    _check("skinny_gemm_gelu_mul", x, w)
    m, k = x.shape
    paired = mul is None
    if paired and w.shape[0] % 2:
        raise ValueError(f"skinny_gemm_gelu_mul without mul needs w = [gate; up] with an even row count, "
                         f"got {w.shape[0]}")
    n = w.shape[0] // 2 if paired else w.shape[0]
    if not paired and (mul.shape != (m, n) or mul.stride(-1) != 1):
        raise ValueError(f"skinny_gemm_gelu_mul needs mul [{m}, {n}] with unit column stride, got "
                         f"{tuple(mul.shape)} stride {mul.stride()}")
    p = _params(w.shape[0], k, given, card_of(x), halve=paired)
    if given.get("swap"):  # a table's or an override's swap for this shape is skinny_gemm's alone: not read here
        raise ValueError("skinny_gemm_gelu_mul has no swap (its dots run x's tile times W's), got swap=True")
    if paired and p["split_k"] != 1:
        raise ValueError(f"skinny_gemm_gelu_mul has no split-K for [gate; up] (a program reads both halves' rows), "
                         f"got split_k={p['split_k']}")
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    tiles, split = triton.cdiv(n, p["block_n"]), p["split_k"]
    ws, cnt, k_split = _split_buffers(x, split, n, tiles, k, p["block_k"])
    _skinny_gemm_gelu_mul_kernel[(tiles, split)](
        x, w, out if paired else mul, out, ws, cnt, m, n, k, k_split, n, x.stride(0), w.stride(0),
        0 if paired else mul.stride(0), out.stride(0), SPLIT=split, PAIRED=paired,
        ONE_LOOP=paired and PAIR_ONE_LOOP, EVICT_FIRST=w_evict.on(x), **_launch(p, x))
    return out
