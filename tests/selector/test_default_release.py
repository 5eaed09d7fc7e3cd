"""One default release (#51): select, the matrices tools run by default, and an overlay written for that release
all run conf/config.yaml's default rules; the seed story is a named matrix."""

from __future__ import annotations

import shutil

from kselect.selector.api import CONF_DIR, compose
from kselect.selector.config.releases import default_rules
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.measure.select import select
from kselect.selector.review.diff import diff_overlays
from kselect.selector.review.matrix import expand, load_matrix, resolve_cells
from kselect.selector.review.pytest_plugin import DEFAULT_MATRIX


def test_default_matrices_run_the_release_select_runs():
    for name in ("default", "smoke", "models", DEFAULT_MATRIX):
        assert load_matrix(name).rules is None, name  # conf/config.yaml's default
    assert load_matrix("seed").rules == load_matrix("seed_smoke").rules == "post_pr52987"
    cell = next(c for c in expand(load_matrix("default")) if c.id == "sm90-gemma4_31b-bf16-fp8")
    [r] = resolve_cells([cell])
    sel = select(compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"]), Evidence.load(CONF_DIR))
    assert r.selection.environment["rules"] == sel.environment["rules"] == default_rules(CONF_DIR)
    assert [(g.label, g.kernel_block_size, g.kv_block_size) for g in r.selection.groups] == \
        [(g.label, g.kernel_block_size, g.kv_block_size) for g in sel.groups] == \
        [("FLASH_ATTN v3", 64, 64), ("FLASH_ATTN v4", 64, 128)]


def test_an_overlay_for_the_default_release_diffs_plainly(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    (conf / "overlay" / "mine.yaml").write_text(
        "# @package _global_\noverlays:\n  mine: a smaller default block\noverlay_bases:\n  mine: vllm_0_34_0\n"
        "rules:\n  block-default_size_64: {default_block_size: 32}\n")
    d = diff_overlays((), ("mine",), "smoke", conf_dir=conf)
    assert d.changed and all(c.b.selection is not None for c in d.changed)
    assert {c.b.selection.block_size for c in d.changed} == {32}
