"""selector/measure/reachable.py: the kernel runs (path, dtype, shape, page) an objective can reach, which
`kselect perf` times."""

from __future__ import annotations

from kselect.selector.api import compose
from kselect.selector.measure.reachable import KernelRun, reachable


def test_every_valid_pin_combination_over_every_block_and_nothing_the_rules_refuse():
    runs = reachable(compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "rules=vllm_0_33_0"]))
    full = {r.page for r in runs if r.path == "FLASH_ATTN_v4" and r.head == 512}
    assert full == {64}  # the FA4 fork's FP8 path reads 64-token pages only
    fi = {r.page for r in runs if r.path == "FLASHINFER" and r.head == 256}
    assert {16, 64} <= fi  # 16: the rules' own block; 64: a pinned larger cache block
    assert KernelRun("TRITON_ATTN", "fp8", 256, 16, 1024, 16) in runs
    assert not any(r.path == "FLEX_ATTENTION" for r in runs)  # FlexAttention has no FP8 cache: refused, so never timed
    assert all(r.kv == "fp8" and r.page <= 256 for r in runs)


def test_each_model_group_shape_is_its_own_run():
    a = reachable(compose(["platform=sm90", "model=gemma4_e4b"]))
    assert {r.path for r in a} >= {"FLASH_ATTN_v4", "FLASHINFER", "TRITON_ATTN"}
    assert {r.num_kv_heads for r in a if r.window} == {2}  # E4B's sliding group
