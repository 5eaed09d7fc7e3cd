"""selector/evidence/perf_data.py `nearest`: which measured bucket stands for a shape. A bucket timed over a spread of
contexts covers every context in its range; equally near, a fenced bucket beats a back-to-back one."""

from __future__ import annotations

from kselect.selector.evidence.perf_data import KernelShape, PerfFile, nearest

from perf_fakes import GPU, entry as E


def data(*entries) -> PerfFile:
    return PerfFile(gpu=GPU, entries={e.bucket: e for e in entries})


def pick(d: PerfFile, context: int, batch: int = 1):
    e = nearest(d, KernelShape("TRITON_ATTN", "bf16", 256, 1024, 16, 16), "decode", batch, context)
    return e and (e.context, e.fence)


FENCED_544 = E("TRITON_ATTN", 256, "decode", 0.02, context=544, page=16).model_copy(
    update={"context_spread": 0.0625, "fence": "layer:192"})
PLAIN_512 = E("TRITON_ATTN", 256, "decode", 0.01, context=512, page=16)


def test_a_context_inside_a_spread_bucket_reads_that_bucket():
    d = data(FENCED_544, PLAIN_512)
    # 516 is nearer 512 by log distance, but the 544 bucket was timed over 510..578 tokens
    assert pick(d, 516) == (544, "layer:192")
    assert pick(d, 578) == (544, "layer:192")
    # outside the spread the log distance decides again
    assert pick(d, 500) == (512, "")
    assert pick(d, 8192) is None  # 15x away from both: no guess


def test_no_spread_keeps_the_plain_log_distance():
    d = data(FENCED_544.model_copy(update={"context_spread": 0.0}), PLAIN_512)
    assert pick(d, 516) == (512, "")
    assert pick(d, 540) == (544, "layer:192")


def test_equally_near_a_fenced_bucket_wins_over_back_to_back():
    at_1024 = E("TRITON_ATTN", 256, "decode", 0.03, context=1024, page=16)
    fenced_256 = E("TRITON_ATTN", 256, "decode", 0.02, context=256, page=16).model_copy(update={"fence": "gemv:192"})
    d = data(at_1024, fenced_256)
    assert pick(d, 512) == (256, "gemv:192")  # 2x either way
    # the same two back to back: the bucket id orders them, as before
    d = data(at_1024, fenced_256.model_copy(update={"fence": ""}))
    assert pick(d, 512) == (1024, "")
