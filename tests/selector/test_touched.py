"""What the review check diffs for a conf/ change (selector/review/touched.py): every rules option a changed
file reaches, over the matrices that declare `review: true`."""

from __future__ import annotations

import shutil

from kselect.selector.api import CONF_DIR
from kselect.selector.review.touched import changed_files, plan, review_matrices, touched_rules

RELEASES = ["vllm_0_32_0", "vllm_0_33_0", "vllm_0_34_0"]


def runs(changed):
    return [r.title for r in plan(touched_rules(CONF_DIR, CONF_DIR, changed), review_matrices(CONF_DIR))]


def test_the_default_release_is_reviewed_over_gemma4_and_models():
    assert runs(["overlay/vllm_0_34_0.yaml"]) == ["rules=vllm_0_34_0 over matrix default",
                                                  "rules=vllm_0_34_0 over matrix models"]


def test_a_release_step_reaches_every_release_built_on_it():
    assert touched_rules(CONF_DIR, CONF_DIR, ["overlay/vllm_0_33_0.yaml"]) == {"vllm_0_33_0": None, "vllm_0_34_0": None}
    assert touched_rules(CONF_DIR, CONF_DIR, ["rules/vllm_0_32_0.yaml"]) == dict.fromkeys(RELEASES)


def test_shared_files_reach_every_rules_option():
    for f in ("capabilities/default.yaml", "model/gemma4_31b.yaml", "conformance/nvidia_h200.yaml", "config.yaml"):
        assert touched_rules(CONF_DIR, CONF_DIR, [f]) == dict.fromkeys(["post_pr52987", *RELEASES]), f
    assert len(runs(["capabilities/default.yaml"])) == 4 + 2 * len(RELEASES)  # seed: its 4 overlay sets


def test_a_seed_overlay_runs_the_seed_sets_that_hold_it():
    assert runs(["overlay/pr48666.yaml"]) == ["rules=post_pr52987 over matrix seed, overlays [pr48666]",
                                              "rules=post_pr52987 over matrix seed, overlays [pr48666,pr52987]"]
    assert runs(["rules/post_pr52987.yaml"])[0] == "rules=post_pr52987 over matrix seed"


def test_matrix_files_move_no_selection():
    assert runs(["matrix/default.yaml"]) == []


def test_changed_files_compares_two_trees(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(CONF_DIR, d, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    (b / "overlay" / "vllm_0_34_0.yaml").write_text((a / "overlay" / "vllm_0_34_0.yaml").read_text() + "# c\n")
    (b / "overlay" / "mine.yaml").write_text("# @package _global_\n")
    (a / "perf" / "nvidia_h200.yaml").unlink()
    assert changed_files(a, b) == ["overlay/mine.yaml", "overlay/vllm_0_34_0.yaml", "perf/nvidia_h200.yaml"]
