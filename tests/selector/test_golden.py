"""Golden matrix: conf/matrix/golden.yaml resolved for the seed's base rules (rules=post_pr52987),
#48666 and #53175, and for the default rules=vllm_0_33_0,
committed as readable text (one block per cell, matrix order) under
tests/selector/__snapshots__/test_golden/. Changing a rule, a capability or an overlay without
updating the files fails here with a line diff. After reviewing the change
(`kselect diff ...`), update them with

    pytest tests/selector/test_golden.py --snapshot-update

Hardware-claim status is not part of the files (it changes when GPUs are measured, not when
rules change); non-claim warnings are (`!` lines)."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from kselect.selector.api import CONF_DIR
from kselect.selector.review.matrix import expand, load_matrix, matrix_text, resolve_cells, resolve_named

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_golden"


class TextSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "txt"


@pytest.fixture
def snapshot_txt(snapshot):
    return snapshot.use_extension(TextSnapshot)


@pytest.mark.parametrize("overlays", [(), ("pr48666",), ("pr53175",)], ids=["base", "pr48666", "pr53175"])
def test_golden_matrix(overlays, snapshot_txt):
    """The seed story: rules=post_pr52987 (the golden matrix declares it) and its overlays."""
    text = matrix_text(resolve_named("golden", overlays), f"matrix golden, overlays {list(overlays)}", claims=False)
    assert text == snapshot_txt


def test_golden_matrix_vllm_0_33_0(snapshot_txt):
    """The default rules (vLLM 0.33.0) over the same cells."""
    text = matrix_text(resolve_named("golden", (), "vllm_0_33_0"), "matrix golden, rules vllm_0_33_0", claims=False)
    assert text == snapshot_txt


def test_golden_matrix_declares_every_overlay_it_snapshots():
    assert load_matrix("golden").overlays == [[], ["pr48666"], ["pr53175"]]


def test_a_rule_change_shows_in_the_golden_text(tmp_path):
    """Disabling one rule of #53175 changes the committed text (so the snapshot test fails)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    ov = conf / "overlay" / "pr53175.yaml"
    key = "  pr53175-sm90_fp8_mm_prefix_requires_triton:\n    stage: reject\n    enabled: true\n"
    assert key in ov.read_text()
    ov.write_text(ov.read_text().replace(key, key.replace("true", "false")))
    spec = load_matrix("golden")
    changed = matrix_text(resolve_cells(expand(spec, ("pr53175",)), conf), "matrix golden, overlays ['pr53175']", claims=False)
    committed = (SNAPSHOTS / "test_golden_matrix[pr53175].txt").read_text()
    assert changed != committed
    added = [x[2:] for x in difflib.ndiff(committed.splitlines(), changed.splitlines()) if x.startswith("+ ")]
    # the multimodal SM90 FP8 full-attention groups go back to FA4 (head 512)
    assert added and any(line.startswith("  full_attention        FLASH_ATTN v4") for line in added)
