"""kselect/measurement/probes/decode_timeline: a profile's kernels split into steps at the host's gaps, and a step's
span, kernel time and gaps."""

from kselect.measurement.probes.decode_timeline import by_position, steps_of, summarize


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


def test_frontier_times_sum_to_the_span_when_kernels_overlap():
    """Under PDL kernels overlap: each is charged how far it moves the step's latest end, so the charges sum to the
    span, a kernel hidden under a longer one is charged nothing, and the first is charged its whole length."""
    k = [(0, 10, "gemv"), (8, 12, "norm"), (9, 11, "hidden"), (11, 30, "gemv"), (31, 33, "norm")]
    r = summarize([k])
    front = {x["name"]: x["frontier_us"] for x in r["kernels"]}
    assert front == {"gemv": 10 + 18, "norm": 2 + 3, "hidden": 0.0}
    assert sum(front.values()) == r["span_us"] == 33


def test_a_layer_by_position_from_its_anchor():
    """Two layers of three kernels after an embedding: each position's frontier averaged over the layers, the kernels
    before the first anchor left out, the last position running to the step's end."""
    k = [(0, 2, "embed"), (2, 4, "_qkv_kernel"), (4, 10, "attn"), (9, 13, "gemv"),
         (13, 14, "_qkv_kernel"), (14, 22, "attn"), (22, 24, "gemv")]
    got = by_position([k])
    assert [p["pos"] for p in got] == [0, 1, 2]
    assert [p["names"] for p in got] == [["_qkv_kernel"], ["attn"], ["gemv"]]
    assert [p["frontier_us"] for p in got] == [(2 + 1) / 2, (6 + 8) / 2, (3 + 2) / 2]
