"""Profiler helpers shared by `kselect perf-steps` and kselect/measurement/gemma4/: device time of the kernels a
range of host calls launched (the attention backends' forward calls, for instance)."""

from __future__ import annotations

import contextlib

import torch

ATTENTION_RANGE = "kselect.attention_forward"  # the profiler range around the attention backends' forward


def device_kernels(events) -> list:
    """The profiler's device-side events that ran: kernels and copies. A profiler range also appears on the
    device (kineto's gpu_user_annotation, spanning its kernels); counted as a kernel it doubles their time."""
    cuda = torch.autograd.DeviceType.CUDA
    return [e for e in events if e.device_type == cuda and not getattr(e, "is_user_annotation", False)
            and e.name != ATTENTION_RANGE]


def device_ms(e) -> float:
    return (e.device_time if hasattr(e, "device_time") else e.cuda_time) / 1e3


@contextlib.contextmanager
def in_range(objs, method: str, name: str):
    """Run obj.<method> inside a profiler range `name` for each obj (instance attributes, removed after)."""
    from torch.profiler import record_function

    def wrap(fn):
        def call(*a, **k):
            with record_function(name):
                return fn(*a, **k)
        return call

    objs = list(dict.fromkeys(objs))
    for o in objs:
        setattr(o, method, wrap(getattr(o, method)))
    try:
        yield
    finally:
        for o in objs:
            delattr(o, method)


def in_range_ms(events, name: str) -> tuple[list, float]:
    """(the CPU ranges `name`, device ms of the kernels inside them). One stream runs kernels in launch
    order, so a range's kernels are the ones inside its GPU-side span (kineto's gpu_user_annotation of the
    range); without those spans, the kernels linked to the range's CPU ops (misses driver-API launches)."""
    cuda = torch.autograd.DeviceType.CUDA
    cpu = [e for e in events if e.name == name and e.device_type != cuda]
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == name and e.device_type == cuda)
    if not spans:
        return cpu, sum(e.device_time_total for e in cpu) / 1e3
    kernels = sorted((e.time_range.start, e.time_range.end, device_ms(e)) for e in device_kernels(events)
                     if e.name != name)
    total, i = 0.0, 0
    for a, b, ms in kernels:
        while i < len(spans) and spans[i][1] < b:
            i += 1
        if i < len(spans) and spans[i][0] <= a:
            total += ms
    return cpu, total


GAP_MAX_US = 20.0  # a longer idle before a kernel is the host between two replays, not a launch gap


def timeline_ms(events, pick) -> float:
    """Device ms that the kernels whose name `pick` accepts hold on one stream's timeline: each one's
    duration plus the launch gap before it (from the previous kernel's end, up to GAP_MAX_US). This is
    what a conf/perf bucket's CUDA-graph wall time per call counts, so it is the like-for-like figure
    for a graph-replayed step; the kernels' durations alone leave the gaps out."""
    ks = sorted((e.time_range.start, e.time_range.end, e.name) for e in device_kernels(events))
    total, prev_end = 0.0, None
    for a, b, name in ks:
        if pick(name):
            gap = a - prev_end if prev_end is not None else GAP_MAX_US + 1
            total += (b - a) + (gap if 0 <= gap <= GAP_MAX_US else 0.0)
        prev_end = b if prev_end is None else max(prev_end, b)
    return total / 1e3
