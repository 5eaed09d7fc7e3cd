"""Fixtures for the kernels tests."""

import sys

# Triton kernels decorated after this line run in the CPU interpreter when there is no GPU.
# (triton reads TRITON_INTERPRET when @triton.jit runs, i.e. when kernels.triton_paged is imported.)
import os  # noqa: E402

try:
    import torch  # noqa: E402

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass
