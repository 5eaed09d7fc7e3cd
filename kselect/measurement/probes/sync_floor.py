"""What one dependent step costs on this card, four ways (issue #52's batch-1 question):

- `graph`: each step its own kernel, launched plainly, all N in one CUDA graph (the decode step without PDL);
- `pdl`: the same kernels launched with PDL (kernels/pdl.py: wait, then release the next), as the step decodes;
- `barrier`: one persistent kernel whose programs meet at a grid barrier (an atomic counter) between steps, as
  kernels/ple_block.py's phases do, and as a megakernel's would; a waiting program polls with atomic adds of 0;
- `barrier_ld`: the same barrier polled with acquire loads (`ld.acquire.gpu`, inline): many programs' atomics on one
  word are served one after another at L2, loads are not. Triton 3.9 already lowers the acquire add of 0 to such a
  load (a local SM90 compile); the device's Triton 3.6 may not, so this mode polls by a load whatever the Triton.

A step is what a norm or a GEMV needs between layers: every program reads the whole vector the step before wrote
(E4B's hidden size, fp32, from L2), reduces it, and writes its slice of the next (x * rsqrt(mean(x^2) + eps) + 1,
each step its own buffer). The cost a step is the slope between N = STEPS[0] and STEPS[1] steps (launch of the graph,
the counter's reset and the first step's ramp cancel), at several program counts.

    python3 -m kselect.measurement.probes.sync_floor --out $OUT/S

Writes --out/sync_floor.json and sync_floor.md (atomically), with the command, commit, card and versions.
On CPU (TRITON_INTERPRET=1) only `check` runs: programs run one after another there, so the barrier takes one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from kselect.kernels import pdl
from kselect.kernels.pdl import wait_then_release
from kselect.measurement.kernel_timing import time_graph
from kselect.measurement.probes.record import record, slope

H = 2560  # E4B's hidden size
EPS = 1e-6
STEPS = (8, 64)
MODES = ("graph", "pdl", "barrier", "barrier_ld")
BLOCKS = (4096, 256, 64, 16)  # a program's slice: 1, 10, 40 and 160 programs for H = 2560 (160: two an SM at most)


@triton.jit
def _step(src, dst, pid, n, eps, BLOCK: tl.constexpr, N_PAD: tl.constexpr):
    c = tl.arange(0, N_PAD)
    x = tl.load(src + c, mask=c < n, other=0.0)
    r = tl.rsqrt(tl.sum(x * x, 0) / n + eps)
    s = pid * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(src + s, mask=s < n, other=0.0) * r + 1.0
    tl.store(dst + s, y, mask=s < n)


@triton.jit
def _one_step_kernel(src, dst, n, eps, BLOCK: tl.constexpr, N_PAD: tl.constexpr, PDL: tl.constexpr):
    wait_then_release(PDL)
    _step(src, dst, tl.program_id(0), n, eps, BLOCK, N_PAD)


@triton.jit
def _count(cnt_ptr, LD: tl.constexpr):
    """The barrier's count, read with acquire semantics: an acquire load (LD; GPU only) or an atomic add of 0."""
    if LD:
        return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [cnt_ptr], dtype=tl.int32,
                                         is_pure=False, pack=1)
    return tl.atomic_add(cnt_ptr, 0, sem="acquire", scope="gpu")


@triton.jit
def _barrier_kernel(buf, cnt_ptr, n, steps, eps, BLOCK: tl.constexpr, N_PAD: tl.constexpr, LD: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for i in range(steps):
        _step(buf + i * n, buf + (i + 1) * n, pid, n, eps, BLOCK, N_PAD)
        tl.debug_barrier()  # every thread's stores before the count
        tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
        seen = _count(cnt_ptr, LD)
        while seen < nprog * (i + 1):
            seen = _count(cnt_ptr, LD)
        tl.debug_barrier()


def reference(x: torch.Tensor, steps: int) -> torch.Tensor:
    """The last step's vector, in PyTorch."""
    for _ in range(steps):
        x = x * torch.rsqrt((x * x).mean() + EPS) + 1.0
    return x


def chain(mode: str, buf: torch.Tensor, cnt: torch.Tensor, steps: int, block: int):
    """Runs `steps` steps from buf[0] into buf[1..steps] (buf [steps + 1, H] fp32) the `mode` way."""
    n = buf.shape[1]
    pad, grid = triton.next_power_of_2(n), (triton.cdiv(n, block),)
    if mode in ("barrier", "barrier_ld"):
        cnt.zero_()
        ld = mode == "barrier_ld" and buf.is_cuda  # the interpreter runs no inline asm: there both poll by atomics
        _barrier_kernel[grid](buf, cnt, n, steps, EPS, BLOCK=block, N_PAD=pad, LD=ld, num_warps=4)
        return
    if mode not in ("graph", "pdl"):
        raise ValueError(f"sync_floor mode must be one of {', '.join(MODES)}, got {mode!r}")
    with pdl.on() if mode == "pdl" else pdl.off():
        launch = pdl.args(buf)
        for i in range(steps):
            _one_step_kernel[grid](buf[i], buf[i + 1], n, EPS, BLOCK=block, N_PAD=pad, num_warps=4, **launch)


def check(device: str, block: int, steps: int = 3) -> dict[str, float]:
    """Each mode's last vector against `reference`: the largest relative error ("barrier" needs every program
    resident, so on CPU only one program)."""
    x = torch.randn(H, device=device, generator=torch.Generator(device).manual_seed(0))
    want = reference(x.double(), steps)
    errs = {}
    for mode in MODES:
        if mode.startswith("barrier") and device == "cpu" and triton.cdiv(H, block) > 1:
            continue
        buf = torch.zeros(steps + 1, H, device=device)
        buf[0] = x
        chain(mode, buf, torch.zeros(1, dtype=torch.int32, device=device), steps, block)
        errs[mode] = float(((buf[-1].double() - want).abs().max() / want.abs().max()).item())
    return errs


def _time(mode: str, steps: int, block: int, reps: int) -> float:
    """Median us of one replay of a graph holding the whole chain."""
    buf = torch.zeros(steps + 1, H, device="cuda")
    buf[0] = torch.randn(H, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    return time_graph([lambda: chain(mode, buf, cnt, steps, block)], reps) * 1000


def measure(reps: int) -> list[dict]:
    rows = []
    for block in BLOCKS:
        row = dict(programs=triton.cdiv(H, block), block=block, rel_err=check("cuda", block, 8))
        for mode in MODES:
            row[mode] = slope(lambda n: _time(mode, n, block, reps), STEPS, "us_step")
        rows.append(row)
    return rows


def render(rows: list[dict], env: dict) -> str:
    lo, hi = STEPS
    out = [f"# One dependent step, four ways: {env.get('gpu', '?')}", "",
           f"`{env['command']}` at `{env['git_commit']}`", "",
           f"us a step: the slope between {lo} and {hi} steps in one CUDA graph (median of replays). Each step reads "
           f"the {H}-value fp32 vector the step before wrote and writes its slice of the next.", "",
           "| programs | `graph` (plain launches) | `pdl` (launches with PDL) | `barrier` (one kernel, grid barrier, "
           "atomic polls) | `barrier_ld` (the same, acquire-load polls) | max rel err |",
           "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['programs']} | " + " | ".join(f"{r[m]['us_step']:.2f}" for m in MODES)
                   + f" | {max(r['rel_err'].values()):.1e} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kselect.measurement.probes.sync_floor", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for sync_floor.json and sync_floor.md")
    ap.add_argument("--reps", type=int, default=200, help="graph replays a point (median)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps must be at least 1, got {args.reps}")
    return record("sync_floor", argv, args.out, lambda: measure(args.reps), render, steps=STEPS, h=H)


if __name__ == "__main__":
    sys.exit(main())
