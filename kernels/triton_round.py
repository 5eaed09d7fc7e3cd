"""Rounding an fp32 value to an activation dtype inside a Triton kernel, as PyTorch's unfused ops do
between operations.

For bf16 the rounding (to nearest even) is done in integer arithmetic: measured on the H200
(kselect/measurement/gemma4/fusion_tune.py), a `.to(bfloat16).to(float32)` pair before an add was not kept as a
rounding (21% of rope outputs differed from PyTorch's by a bf16 step, none with the norm alone);
and Triton's CPU interpreter truncates on `.to(bfloat16)`. With this helper the kernels' bf16 results
equal PyTorch's op by op, up to the fp32 reduction order of the norms.
"""

import triton
import triton.language as tl


@triton.jit
def round_like(x, ref_ptr):
    """x (fp32) rounded to ref_ptr's element type, returned as fp32."""
    dt: tl.constexpr = ref_ptr.dtype.element_ty
    if dt == tl.bfloat16:
        u = x.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        return u.to(tl.float32, bitcast=True)
    elif dt == tl.float32:
        return x
    else:
        return x.to(dt).to(tl.float32)
