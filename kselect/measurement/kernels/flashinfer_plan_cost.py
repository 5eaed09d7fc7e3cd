"""Host cost of the FLASHINFER adapter per call: with the batch's plan reused (every layer after the
first in a step) and with a fresh plan (the first layer of each group per step). CUDA, flashinfer.

    python3 -m kselect.measurement.kernels.flashinfer_plan_cost
"""

import time

import torch

from kselect.backends import make_backend
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.kernels.cases import make_case

case = make_case([1], [600], hq=32, hkv=16, d=256, block_size=16, dtype=torch.bfloat16,
                 cache_dtype=torch.float8_e4m3fn, descale="layer", window_left=1023, device="cuda")
be = make_backend(make_group("FLASHINFER", None, 256, "fp8_e4m3", 16, 16, "k_v", 16))
meta, layer = meta_of(case), layer_of(case)
for _ in range(3):
    be.forward(case.q, case.k_cache, case.v_cache, meta, layer)
torch.cuda.synchronize()
for label, fresh in (("same meta", False), ("new meta each call (plan)", True)):
    t = time.perf_counter()
    for _ in range(50):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case) if fresh else meta, layer)
    torch.cuda.synchronize()
    print(label, f"{(time.perf_counter() - t) / 50 * 1e3:.3f} ms/call")
