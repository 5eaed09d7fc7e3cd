"""tests/conftest.py's interpreter shim: a kernel's @triton.jit helpers and triton.language's own (tl.sum, tl.max)
run without Triton re-patching the language at each call, with the same results."""

import os

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("KSELECT_TEST_TRITON_REPATCH"):
    pytest.skip("the shim is for Triton's CPU interpreter, and switched off", allow_module_level=True)


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _kernel(x_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    x = _twice(_twice(tl.load(x_ptr + i)))
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, 0) + tl.max(x, 0))


def test_helpers_skip_the_language_walk_with_the_same_results(monkeypatch):
    from triton.runtime import interpreter as ti

    shim = ti._patch_lang
    assert getattr(shim, "kselect_once", False), "tests/conftest.py's shim is not installed"
    walks, real = [], shim.original
    monkeypatch.setattr(shim, "original", lambda fn: walks.append(fn.__name__) or real(fn))
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(3)
    _kernel[(3,)](x, out, N=8)
    assert torch.equal(out, torch.full((3,), 4 * float(x.sum()) + 4 * float(x.max())))
    # the launch patches; of the six helper calls and the reductions' own helpers, at most the first of
    # triton.language's (tl.core, which Triton leaves patched) walks again
    assert walks[0] == "_kernel" and len(walks) <= 2, walks
