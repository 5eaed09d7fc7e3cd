"""Programmatic dependent launch (PDL, SM90 and later) for the Triton kernels here.

Why: a batch-1 decode step is ~15 small kernels a layer (E4B: 643 a step, 3.75 ms of kernels in a 3.96 ms
step, bench/results/h200/splits/README.md). Launched plainly, each kernel starts only when the one before has
drained, so every boundary pays a launch, a ramp and a tail. Launched with PDL, a kernel's programs may start
while the previous kernel finishes, and read their weights meanwhile (triton-lang/triton#6394 added it).

The protocol every kernel here keeps when its PDL constexpr is on:
  1. before `gdc_wait()`: loads of weights only (parameters, which no kernel of a step writes). One exception, behind
     a switch: kernels/triton_paged.py's PREFETCH_KV also reads data that only kernels before the previous one
     wrote (the step's tables, earlier steps' keys), complete by step 3 of the kernel before;
  2. `gdc_wait()`: the previous kernel has completed and its writes are visible. Each PDL kernel waits before
     it can complete, so every earlier kernel has completed too;
  3. `gdc_launch_dependents()`: the next kernel may launch now and do its own step 1 beside this one.
Nothing is written before step 2: an output buffer may be memory the previous kernel still reads (the caching
allocator hands freed memory out again in stream order). A kernel launched without PDL (cuBLAS, FlashAttention,
PyTorch's) starts after the previous kernel completes, as always. Kernels launch plainly unless a caller asks for
PDL with `on()`.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .switches import switched

_wanted = False  # set inside on(): the caller knows its step (gemma4/fused.py pdl_step)
_blocked = 0  # depth of off(): wins over on(), e.g. a profile around a forward that asks for PDL
_early = False  # set inside early(): step 3 before step 2 (a measurement; see `early`)
_late = False  # set inside late(): step 3 after the kernel's reads, in the kernels that have such a point
EARLY = 2  # the PDL constexpr of a kernel that releases before it waits
LATE = 3  # ... of a kernel that releases after its reads (`release_late`), before its stores


@triton.jit
def wait_then_release(PDL: tl.constexpr):
    """Steps 2 and 3 of the protocol above, in a kernel launched with PDL (nothing when PDL is off); PDL == EARLY:
    step 3 first, so the next kernel may launch while this one still waits for the one before it."""
    if PDL == 2:
        gdc_launch_dependents()
        gdc_wait()
    elif PDL == 3:
        gdc_wait()  # step 3 comes at the kernel's `release_late`
    elif PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def release_late(PDL: tl.constexpr):
    """Step 3 where PDL == LATE: called after the kernel's reads are used (so done) and before its stores, so the
    next kernel's programs, which read their weights as soon as they launch, do not queue beside those reads."""
    if PDL == 3:
        gdc_launch_dependents()


@functools.lru_cache(maxsize=None)
def _supported(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def active() -> bool:
    """Whether the switch asks for PDL here (inside on(), not inside off()), whatever the device."""
    return _wanted and not _blocked


def enabled(t: torch.Tensor) -> bool:
    """Whether kernels on t's device launch with PDL: asked for (active), on a CUDA device of SM90 or later."""
    return active() and t.is_cuda and _supported(t.device.index if t.device.index is not None else torch.cuda.current_device())


def args(t: torch.Tensor, late: bool = False) -> dict:
    """Launch keywords for a kernel here whose tensors live with t: its PDL constexpr, and Triton's launch_pdl.
    late: the kernel calls `release_late` (it gets LATE inside late())."""
    if not enabled(t):
        return {"PDL": False}
    return {"PDL": EARLY if _early else LATE if _late and late else True, "launch_pdl": True}


def on():
    """Launch with PDL inside (SM90+), unless an enclosing off() says otherwise. Kernels launch plainly by default:
    whether PDL pays depends on the step (bench/results/h200/pdl/), which the caller knows."""
    return switched(globals(), _wanted=True)


@contextlib.contextmanager
def off():
    """Launch plainly inside, whatever an on() inside it asks (a CUDA graph captured here keeps it)."""
    global _blocked
    _blocked += 1
    try:
        yield
    finally:
        _blocked -= 1


def late(on: bool = True):
    """Kernels launched with PDL inside that have a late point (the add-norm, kernels/rms_norm.py; the split merge,
    kernels/split_merge.py) release the next kernel there, after their reads, not right after their wait. Why: a big
    projection's programs read their first chunk of W as soon as they launch, and those reads slow the latency-bound
    kernel before it. Off: in E4B's batch-1 step on the H100 those kernels got 0.6-0.9 us shorter and the projections
    after them longer by more, 0.972x (bench/results/h100/late_release/). A measurement's switch
    (kselect/measurement/gemv_variants.py `pdl_late`)."""
    return switched(globals(), _late=on)


def early(on: bool = True):
    """Kernels launched with PDL inside release the next kernel before they wait (protocol step 3 before step 2). Every
    kernel still waits before it reads activations or writes, so the order of data is the same; what changes is how
    early a chain of short kernels lets the next one start reading its weights. A measurement's switch
    (kselect/measurement/gemv_variants.py `pdl_early`), off by default."""
    return switched(globals(), _early=on)

