"""kselect/profiling: the kernels of a range of host calls, from profiler events (fakes: no GPU needed)."""

from types import SimpleNamespace

import torch

from kselect.measurement.profiling import GAP_MAX_US, in_range, in_range_ms, timeline_ms

CPU, CUDA = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA


def ev(name, dev, start, end, ms=0.0, total_us=0.0):
    return SimpleNamespace(name=name, device_type=dev, time_range=SimpleNamespace(start=start, end=end),
                           device_time=ms * 1e3, device_time_total=total_us)


def test_kernels_inside_the_ranges_gpu_spans_count():
    events = [ev("att", CPU, 0, 5), ev("att", CPU, 6, 9),
              ev("att", CUDA, 10, 20), ev("k1", CUDA, 10, 12, 2.0), ev("k2", CUDA, 15, 20, 5.0),  # first call's kernels
              ev("gemm", CUDA, 21, 29, 4.0),  # between the calls: not attention
              ev("att", CUDA, 30, 40), ev("k3", CUDA, 31, 39, 8.0), ev("norm", CUDA, 41, 42, 1.0)]
    calls, ms = in_range_ms(events, "att")
    assert len(calls) == 2 and ms == 15.0


def test_without_gpu_spans_the_cpu_ranges_linked_kernels_count():
    calls, ms = in_range_ms([ev("att", CPU, 0, 5, total_us=1500.0), ev("k", CUDA, 1, 2, 9.0)], "att")
    assert len(calls) == 1 and ms == 1.5


def test_in_range_wraps_and_restores():
    class B:
        def forward(self, x):
            return x + 1

    b = B()
    with in_range([b, b], "forward", "att"):
        assert "forward" in vars(b) and b.forward(1) == 2  # an instance wrapper (once for a repeated object)
    assert "forward" not in vars(b) and b.forward(1) == 2


def test_timeline_counts_each_picked_kernel_and_the_launch_gap_before_it():
    # times in us: a graph step gemm | gap 2 | attn 8 | gap 1 | merge 3 | norm; then the host between two
    # replays (100 us idle) before the next step's attention kernel: that idle is not a launch gap
    events = [ev("gemm", CUDA, 0, 50), ev("attn_fwd", CUDA, 52, 60), ev("attn_merge", CUDA, 61, 64),
              ev("norm", CUDA, 64, 70), ev("attn_fwd", CUDA, 70 + GAP_MAX_US + 80, 70 + GAP_MAX_US + 88),
              ev("kselect.attention_forward", CUDA, 52, 64)]  # a range's GPU span is no kernel
    ms = timeline_ms(events, lambda n: n.startswith("attn"))
    assert abs(ms - (2 + 8 + 1 + 3 + 8) / 1e3) < 1e-12
    assert timeline_ms(events, lambda n: False) == 0.0


def test_a_ranges_device_span_is_no_kernel_of_the_step_profile():
    # eager decode under in_range: the range's device-side span (named, or flagged a user annotation by kineto)
    # covers its kernels; counted as a kernel it landed in "elementwise" and doubled the attention's time
    from kselect.measurement.step_profile import by_category

    span = ev("some_range", CUDA, 0, 40, 0.040)
    span.is_user_annotation = True
    events = [ev("_gemv_kernel", CUDA, 0, 10, 0.010), ev("kselect.attention_forward", CUDA, 10, 30, 0.020),
              ev("_attn_fwd", CUDA, 11, 19, 0.008), ev("_merge_splits", CUDA, 20, 30, 0.002), span,
              ev("cpu_op", CPU, 0, 40, 0.5)]
    count, ms, names = by_category(events)
    assert dict(count) == {"gemm": 1, "attention": 2}
    assert abs(ms["attention"] - 0.010) < 1e-12 and ms["elementwise"] == 0.0
    assert set(names) == {"_gemv_kernel", "_attn_fwd", "_merge_splits"}
