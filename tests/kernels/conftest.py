"""Make the repo root importable under plain `pytest` (rootdir-relative test modules)."""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Triton kernels decorated after this line run in the CPU interpreter when there is no GPU.
# (triton reads TRITON_INTERPRET when @triton.jit runs, i.e. when kernels.triton_paged is imported.)
import os  # noqa: E402

try:
    import torch  # noqa: E402

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass
