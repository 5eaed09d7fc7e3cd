"""Gemma-4's per-layer-input block at one row as one kernel, its phases joined by a grid barrier:

    s  = res0 + norm(y) * w0                      the MLP's add-norm (PRENORM; else s is given)
    g  = gelu_tanh(s @ Wg.T) * ple                the per-layer-input gate, [P]
    p  = g @ Wp.T                                 the per-layer projection, [H]
    x  = (s + norm(p) * wa) [* scalar],  xn = norm(x) * wb      the layer's end

Why: in E4B's one-token decode step these are four kernels a layer (an add-norm, two 1.3 MB GEMVs, an add-norm),
each paying a launch, a PDL wait and a dependent L2 read while the memory idles (bench/results/h100/kv_pre/: ~2 us a
boundary). Here every program loads its slices of both weights before the PDL wait, then waits once: it rebuilds s
itself (2,560 values), dots its gate rows, stores them, meets the others at a counter (the barrier), dots its
projection rows with all of g, and the last program to count itself out computes the add-norm. No value is summed
by atomics, so a result is the same bits every run (a captured step equals its eager run). Measured on the H100 it
tied: the block took 7.8-8.1 us a layer where the four kernels took 8.35, the barrier costing about what a PDL
boundary does (bench/results/h100/ple_block/). gemma4/fused.py keeps it off (PLE_BLOCK).

Deadlock-free only while every program is resident at once: the grid is at most two programs an SM (4 warps: any
register count fits twice) and the programs release the next kernel (PDL) only after all have started. Off the GPU
(Triton's interpreter runs programs one after another) the phases are three launches instead (PHASE 1 to 3), the
same code. Values are rounded where the unfused kernels round them (kernels/rms_norm.py, kernels/gemv.py's gelu
epilogue); the dots' fp32 order differs from kernels/gemv.py's, so results equal those kernels' up to it.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import pdl
from .gelu_mul import gelu_mul_rounded
from .pdl import wait_then_release
from .rms_norm import add_norm_values, scalar_value
from .switches import launch_switched
from .triton_round import round_like

GATE_ROWS = 2  # rows of Wg a program: E4B's 256 gate rows on 128 programs
PROJ_ROWS = 16  # rows of Wp a program: E4B's 2,560 projection rows on 160 programs (at most 2 an SM on 132)
WARPS = 4
MAX_H = 8192


def configured(gate_rows: int, proj_rows: int, warps: int):
    """Other launch parameters inside (a measurement's variant; a CUDA graph captured inside keeps them). More than
    4 warps a program keeps one program an SM at most for the barrier: `fits` counts it."""
    return launch_switched(globals(), "ple_block", GATE_ROWS=gate_rows, PROJ_ROWS=proj_rows, WARPS=warps)


_BARRIERS: dict = {}


def barriers(device: torch.device) -> torch.Tensor:
    """The device's two int32 counters (the barrier, the tail), zero between launches: the last program resets both.
    One pair a device: a step's blocks run on one stream, ten kernels apart."""
    if device not in _BARRIERS:
        _BARRIERS[device] = torch.zeros(2, dtype=torch.int32, device=device)
    return _BARRIERS[device]


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@triton.jit
def _gate(s, wg, ple_ptr, g_ptr, rows, P, ref_ptr):
    """This program's gate rows: gelu_tanh(s . Wg[row]) * ple[row], rounded as the GEMV's gelu epilogue, stored."""
    ok = rows < P
    dots = round_like(tl.sum(wg * s[None, :], axis=1), ref_ptr)
    u = tl.load(ple_ptr + rows, mask=ok, other=0.0).to(tl.float32)
    tl.store(g_ptr + rows, gelu_mul_rounded(dots, u, ref_ptr).to(g_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _proj(wp, g_ptr, p_ptr, rows, H, P, P_PAD: tl.constexpr, ref_ptr):
    """This program's projection rows from all of g (other programs' writes: read from L2, not L1)."""
    c = tl.arange(0, P_PAD)
    g = tl.load(g_ptr + c, mask=c < P, other=0.0, cache_modifier=".cg").to(tl.float32)
    p = round_like(tl.sum(wp * g[None, :], axis=1), ref_ptr)
    tl.store(p_ptr + rows, p.to(p_ptr.dtype.element_ty), mask=rows < H)


@triton.jit
def _tail(p_ptr, r, wa_ptr, wb_ptr, scalar, x_ptr, xn_ptr, H, eps, H_PAD: tl.constexpr, HAS_WA: tl.constexpr,
          HAS_SCALAR: tl.constexpr, SCALAR_PTR: tl.constexpr, HAS_WB: tl.constexpr):
    """x = (r + norm(p) * wa) [* scalar] and xn = norm(x) * wb, rounded as kernels/rms_norm.py rounds them; r the
    residual's fp32 values. One program runs it, so its weights are read here, not held by every program."""
    c = tl.arange(0, H_PAD)
    ok = c < H
    p = tl.load(p_ptr + c, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
    wa = 1.0
    wb = 1.0
    if HAS_WA:
        wa = tl.load(wa_ptr + c, mask=ok, other=0.0).to(tl.float32)
    if HAS_WB:
        wb = tl.load(wb_ptr + c, mask=ok, other=0.0).to(tl.float32)
    sc = 1.0
    if HAS_SCALAR:
        sc = scalar_value(scalar, SCALAR_PTR)
    x, xn = add_norm_values(p, r, wa, wb, sc, H, eps, x_ptr, True, HAS_WA, HAS_SCALAR, HAS_WB)
    tl.store(x_ptr + c, x.to(x_ptr.dtype.element_ty), mask=ok)
    if HAS_WB:
        tl.store(xn_ptr + c, xn.to(xn_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _line_to_l2(wa_ptr, wb_ptr, H, pid, HAS_WA: tl.constexpr, HAS_WB: tl.constexpr, L2: tl.constexpr):
    """Program pid asks L2 for one 128-byte line of the tail's weights (wa's lines first, then wb's): the tail runs in
    whichever program counts itself out last, after the wait, and would otherwise read them from DRAM."""
    if L2:  # the interpreter runs no inline asm
        per = tl.cdiv(H * 2, 128)  # 16-bit weights
        if HAS_WA:
            if pid < per:
                tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [wa_ptr + pid * 64],
                                          dtype=tl.int32, is_pure=False, pack=1)
        if HAS_WB:
            if pid >= per:
                if pid < 2 * per:
                    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l",
                                              [wb_ptr + (pid - per) * 64], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _arrive(cnt_ptr):
    """Count this program in (once a program, after every thread's stores); the count before it."""
    tl.debug_barrier()
    return tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _ple_block_kernel(x_ptr, res0_ptr, w0_ptr, s_ptr, wg_ptr, ple_ptr, g_ptr, wp_ptr, p_ptr, wa_ptr, scalar, wb_ptr,
                      out_ptr, outn_ptr, bar_ptr, H, P, eps,
                      H_PAD: tl.constexpr, P_PAD: tl.constexpr, GR: tl.constexpr, PR: tl.constexpr,
                      PRENORM: tl.constexpr, HAS_W0: tl.constexpr, HAS_WA: tl.constexpr, HAS_SCALAR: tl.constexpr,
                      SCALAR_PTR: tl.constexpr, HAS_WB: tl.constexpr, PHASE: tl.constexpr, PDL: tl.constexpr,
                      L2: tl.constexpr = False):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    c = tl.arange(0, H_PAD)
    c_ok = c < H
    g_rows = pid * GR + tl.arange(0, GR)
    p_rows = pid * PR + tl.arange(0, PR)
    pc = tl.arange(0, P_PAD)
    # weights before the PDL wait (kernels/pdl.py): both slices, the norms' weights
    wg = tl.load(wg_ptr + g_rows.to(tl.int64)[:, None] * H + c[None, :], mask=(g_rows < P)[:, None] & c_ok[None, :],
                 other=0.0).to(tl.float32)
    wp = tl.load(wp_ptr + p_rows.to(tl.int64)[:, None] * P + pc[None, :], mask=(p_rows < H)[:, None] & (pc < P)[None, :],
                 other=0.0).to(tl.float32)
    w0 = 1.0
    if HAS_W0:
        w0 = tl.load(w0_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    _line_to_l2(wa_ptr, wb_ptr, H, pid, HAS_WA, HAS_WB, L2)
    wait_then_release(PDL)
    if PHASE == 3:  # the interpreter's last launch: the residual as stored (s by program 0 of the first)
        s = tl.load(s_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    else:
        s = tl.load(x_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
        if PRENORM:  # the MLP's add-norm, in every program (s stored once)
            r0 = tl.load(res0_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
            s, _ = add_norm_values(s, r0, w0, w0, 1.0, H, eps, out_ptr, True, HAS_W0, False, False)
    if PHASE < 2:
        if PRENORM:
            tl.store(s_ptr + c, s.to(s_ptr.dtype.element_ty), mask=c < tl.where(pid == 0, H, 0))
        _gate(s, wg, ple_ptr, g_ptr, g_rows, P, out_ptr)
    if PHASE == 0:  # the grid barrier: every gate row stored before any program reads g
        n = _arrive(bar_ptr)
        while n < nprog:
            n = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
    if PHASE == 0 or PHASE == 2:
        _proj(wp, g_ptr, p_ptr, p_rows, H, P, P_PAD, out_ptr)
    if PHASE == 0:
        if _arrive(bar_ptr + 1) == nprog - 1:  # the last program: every program is past the barrier
            if not PRENORM:  # the residual (without PRENORM, not necessarily the gate's input)
                s = tl.load(s_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
            _tail(p_ptr, s, wa_ptr, wb_ptr, scalar, out_ptr, outn_ptr, H, eps, H_PAD, HAS_WA, HAS_SCALAR, SCALAR_PTR,
                  HAS_WB)
            tl.store(bar_ptr, 0)
            tl.store(bar_ptr + 1, 0)
    if PHASE == 3:
        _tail(p_ptr, s, wa_ptr, wb_ptr, scalar, out_ptr, outn_ptr, H, eps, H_PAD, HAS_WA, HAS_SCALAR, SCALAR_PTR,
              HAS_WB)


def fits(x: torch.Tensor, wg: torch.Tensor, wp: torch.Tensor, ple: torch.Tensor) -> bool:
    """Whether the block runs here: one row, x [1, H] and ple [1, P] of unit column stride, Wg [P, H] and Wp [H, P]
    contiguous, H at most MAX_H, and on a GPU few enough programs to be resident at once."""
    if x.dim() != 2 or x.shape[0] != 1 or x.stride(1) != 1 or ple.dim() != 2 or ple.stride(1) != 1:
        return False
    h, p = x.shape[1], wg.shape[0]
    if tuple(wg.shape) != (p, h) or tuple(wp.shape) != (h, p) or not (wg.is_contiguous() and wp.is_contiguous()):
        return False
    if tuple(ple.shape) != (1, p) or h > MAX_H:
        return False
    return not x.is_cuda or programs(h, p) <= (2 if WARPS <= 4 else 1) * _sm_count(x.device.index or 0)


def programs(h: int, p: int) -> int:
    return max(triton.cdiv(p, GATE_ROWS), triton.cdiv(h, PROJ_ROWS))


def ple_block(x, ple, wg, wp, res, wa, eps, scalar=None, wb=None, *, pre=None):
    """(x', xn) of the block above for one row: x the gate's input (or, with pre = (y, res0, w0, s), the MLP's
    add-norm computed here and s written, x ignored), res the block's residual (s itself with pre), wa, wb, scalar as
    kernels/rms_norm.py's add_rms_norm. xn is x' where wb is None."""
    h, p = wg.shape[1], wg.shape[0]
    if pre is not None:
        y, res0, w0, s = pre
        x = y
        if res is not s:
            raise ValueError("ple_block with an add-norm before it takes that add-norm's s as its residual")
    else:
        y, res0, w0, s = x, x, None, res
    if not fits(x, wg, wp, ple) or (pre is not None and not fits(res0, wg, wp, ple)):
        raise ValueError(f"ple_block needs one row x [1, {h}] and ple [1, {p}] of unit column stride, Wg [{p}, {h}] "
                         f"and Wp [{h}, {p}] contiguous; got x {tuple(x.shape)}, ple {tuple(ple.shape)}")
    out = torch.empty(1, h, dtype=x.dtype, device=x.device)
    outn = torch.empty_like(out) if wb is not None else out
    g = torch.empty(1, p, dtype=x.dtype, device=x.device)
    pr = torch.empty(1, h, dtype=x.dtype, device=x.device)
    on_device = scalar is None or isinstance(scalar, torch.Tensor)
    args = (x, res0, x if w0 is None else w0, s, wg, ple, g, wp, pr, x if wa is None else wa,
            (x if scalar is None else scalar) if on_device else float(scalar), x if wb is None else wb, out, outn)
    meta = dict(H_PAD=triton.next_power_of_2(h), P_PAD=triton.next_power_of_2(p), GR=GATE_ROWS, PR=PROJ_ROWS,
                PRENORM=pre is not None, HAS_W0=w0 is not None, HAS_WA=wa is not None, HAS_SCALAR=scalar is not None,
                SCALAR_PTR=on_device, HAS_WB=wb is not None, num_warps=WARPS)
    grid = (programs(h, p),)
    if x.is_cuda:
        _ple_block_kernel[grid](*args, barriers(x.device), h, p, float(eps), PHASE=0, L2=x.dtype.itemsize == 2, **meta,
                                **pdl.args(x))
    else:  # the interpreter: one phase a launch
        bar = torch.zeros(2, dtype=torch.int32)
        for phase in (1, 2):
            _ple_block_kernel[grid](*args, bar, h, p, float(eps), PHASE=phase, PDL=False, **meta)
        _ple_block_kernel[(1,)](*args, bar, h, p, float(eps), PHASE=3, PDL=False, **meta)
    return out, (outn if wb is not None else out)
