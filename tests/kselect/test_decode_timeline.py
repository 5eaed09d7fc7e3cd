"""kselect/measurement/probes/decode_timeline: a profile's kernels split into steps at the host's gaps, and a step's
span, kernel time and gaps."""

from kselect.measurement.probes.decode_timeline import steps_of, summarize


def test_steps_split_at_host_gaps_and_sum_kernels_and_gaps():
    # two steps of three kernels (us), 80 us of host time between them; overlapping kernels each count in full
    k = [(0, 5, "gemv_kernel"), (6, 10, "kernel_unified_attention"), (9, 12, "add_rms_norm"),
         (92, 97, "gemv_kernel"), (99, 103, "kernel_unified_attention"), (103, 104, "add_rms_norm")]
    steps = steps_of(k, gap_max_us=20)
    assert [len(s) for s in steps] == [3, 3]
    r = summarize(steps)
    assert r["steps"] == 2 and r["kernels_per_step"] == 3
    assert r["span_us"] == (12 + 12) / 2 and r["kernel_us"] == (12 + 10) / 2
    assert r["by_category"]["gemm"] == 5 and r["by_category"]["attention"] == 4
    assert [x["name"] for x in r["kernels"]][0] == "gemv_kernel"


def test_a_long_kernel_keeps_its_step_whole():
    """The gap is measured from the latest end so far: a kernel that outlasts the next start is no gap."""
    k = [(0, 50, "gemv_kernel"), (5, 8, "a"), (55, 60, "b")]
    assert len(steps_of(k, gap_max_us=20)) == 1


def test_no_kernels_is_an_empty_summary():
    assert summarize([])["kernel_us"] == 0 and summarize([])["steps_seen"] == 0
