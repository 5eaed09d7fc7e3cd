"""kernels/l2_prefetch.py: the byte ranges a prefetch covers (CPU), the kernel compiled for SM90 by Triton's
ahead-of-time compiler (CPU, a subprocess: the interpreter has no PTX), and run on the device (marked gpu)."""

import os
import subprocess
import sys

import pytest
import torch

from kselect.kernels import l2_prefetch as L

pytest.importorskip("triton")


def test_adjacent_views_are_one_range_and_a_limit_cuts_each_tensor():
    buf = torch.zeros(10, 8, dtype=torch.bfloat16)
    q, k, v = buf[:4], buf[4:6], buf[6:]  # q/k/v weights as the fused ops' views of one buffer
    base = buf.data_ptr()
    assert L.byte_ranges([v, q, k]) == [(base, 160)]
    assert L.byte_ranges([q, v]) == [(base, 64), (v.data_ptr(), 64)]
    assert L.byte_ranges([q, k], limit=16) == [(base, 16), (k.data_ptr(), 16)]
    assert L.byte_ranges([q], limit=0) == []
    with pytest.raises(ValueError, match="contiguous"):
        L.byte_ranges([buf[:, :4]])


COMPILE = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import l2_prefetch as L
src = ASTSource(fn=L._prefetch_kernel, signature={"base": "i64", "nbytes": "i64", "CHUNK": "constexpr",
                "PER_PROG": "constexpr"}, constexprs={(2,): L.CHUNK, (3,): L.PER_PROG})
try:
    out = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    print("cubin" in out.asm and "cp.async.bulk.prefetch.L2.global" in out.asm["ptx"])
except Exception as e:
    print(repr(e)[:2000])
'''


def test_the_prefetch_kernel_compiles_for_sm90():
    """ptxas accepts the inline cp.async.bulk.prefetch (an error in the asm string shows here, not on the device)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    if "ptxas" in last:
        pytest.skip("this Triton build has no SM90 assembler")
    assert last == "True", last


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prefetch_runs_on_the_device_and_changes_nothing():
    if not L.supported(torch.zeros(1, device="cuda")):
        pytest.skip("needs SM90")
    w = torch.randn(3000, 2560, device="cuda", dtype=torch.bfloat16)
    before = w.clone()
    L.prefetch_l2(L.byte_ranges([w]))
    L.prefetch_l2([(w.data_ptr() + 3, 1000)])  # unaligned start, a tail under 16 bytes
    L.prefetch_l2(L.byte_ranges([w[:2], w[2:7]], limit=100))
    torch.cuda.synchronize()
    assert torch.equal(w, before)
