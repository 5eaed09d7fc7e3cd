"""What a run records about where it ran: the command, the project's commit, versions, the device, and the device's
measured roofs (copy bandwidth, bf16 GEMM)."""

from __future__ import annotations

import platform as _platform
import shlex
import statistics
import sys
import time

import torch

from kselect.gemma4.host_threads import serving_threads
from kselect.measurement.e2e.hf import HF_THREADS


def environment(argv: list[str], script: str = "-m kselect.measurement.e2e", command: str | None = None) -> dict:
    """The run's command (`command`, or `script` with argv), the project's commit, versions, the device."""
    from kselect.provenance import project_commit, versions  # the project's commit, not an enclosing repo's

    own = project_commit()
    env = dict(command=command or shlex.join([sys.executable.rsplit("/", 1)[-1], *script.split(), *argv]),
               git_commit=own["commit"], git_dirty=own["dirty"], commit_source=own["commit_source"], versions=versions(),
               torch=str(torch.__version__), python=_platform.python_version(), host=_platform.node(),
               date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    for mod in ("transformers", "triton"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            env[mod] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), gpu_mem_gib=round(p.total_memory / 2**30, 1),
                   cuda=torch.version.cuda, capability=f"{p.major}.{p.minor}",
                   host_threads=serving_threads("cuda") or torch.get_num_threads(),  # the engines serve with
                   hf_threads=HF_THREADS)
    else:
        env.update(gpu=None, cpu_threads=torch.get_num_threads())
    return env


def ceilings(device: torch.device) -> dict:
    """Measured copy bandwidth (read+write) and bf16 GEMM throughput: the roofs for plots."""
    if device.type != "cuda":
        return {}
    n = 1 << 30
    a = torch.randn(n // 2, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    m = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    out = {}
    for key, fn, work in (("copy_gbs", lambda: b.copy_(a), 2 * n / 1e9), ("bf16_gemm_tflops", lambda: m @ m, 2 * 8192**3 / 1e12)):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        out[key] = round(work / statistics.median(ts), 1)
    del a, b, m
    torch.cuda.empty_cache()
    return out
