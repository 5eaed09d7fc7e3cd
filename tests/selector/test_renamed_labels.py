"""Tools read record fields, never text: rename every human label of the rendering vocabulary
(selector/base/texts.py) and the diff, the plot's marks and the gathered sweep rows stay the same,
while the rendered outputs do change."""

from __future__ import annotations

import codecs
import re

from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from kselect.selector.base import texts
from kselect.selector.api import CONF_DIR
from kselect.selector.review.diff import diff_results
from kselect.selector.review.diff_render import render
from kselect.selector.review.gather import rows
from kselect.selector.review.grid import Grid, cell_marks
from kselect.selector.review.matrix import MatrixSpec, expand, resolve_cells
from kselect.selector.review.sweep import run_job

SPEC = MatrixSpec(
    name="renamed",
    rules="post_pr52987",  # the pr48666 overlay patches these rules
    axes={"platform": ["cpu", "sm90"], "model": ["gemma4_tiny", "gemma4_31b"], "kv_cache": ["auto", "fp8"],
          "scales": ["unit", "calibrated"], "spec_decode": ["none", "mtp"], "multimodal": [False, True]},
    pins={"auto": {}, "bs16": {"kv_cache.block_size": 16}, "triton": {"attention.backend": "TRITON_ATTN"}},
    skip=[{"when": {"scales": "calibrated", "kv_cache": "auto"}, "reason": "calibrated scales need an FP8 cache"},
          # FlashInfer's SM90 builder refuses sliding-window layers (a text-only FP8 target, an MTP drafter): cells whose
          # failure text would be renamed too
          {"when": {"platform": "sm90", "kv_cache": "fp8", "multimodal": False}, "reason": "FlashInfer fails"},
          {"when": {"platform": "sm90", "kv_cache": "fp8", "spec_decode": "mtp"}, "reason": "FlashInfer fails"}],
)  # fmt: skip
JOB = ["rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "kv_cache.scales=calibrated", "spec_decode=mtp",
       "attention.backend=TRITON_ATTN"]


def _respell(template: str) -> str:
    """rot13 outside `{placeholders}`: no word of the label survives ("block" -> "oybpx")."""
    parts = re.split(r"(\{[^}]*\})", template)
    return "«" + "".join(p if p.startswith("{") else codecs.encode(p, "rot13") for p in parts) + "»"


def _rename(monkeypatch):
    """Every label of texts.py gets another spelling."""
    for name, value in list(vars(texts).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, str):
            monkeypatch.setattr(texts, name, _respell(value))
        elif isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            monkeypatch.setattr(texts, name, {k: _respell(v) for k, v in value.items()})
    monkeypatch.setattr(texts, "group_label", lambda gid: _respell(gid))
    real_blocks, real_detail = texts.describe_blocks, texts.claim_detail
    monkeypatch.setattr(texts, "describe_blocks", lambda b: _respell(real_blocks(b)))
    monkeypatch.setattr(texts, "claim_detail", lambda c: _respell(real_detail(c)))


def _results():
    a = resolve_cells(expand(SPEC, ()))
    b = resolve_cells(expand(SPEC, ("pr48666",)))
    d = diff_results(SPEC, a, b)
    blocks = {
        (x.kind, x.key, tuple(c.id for c in x.cells), frozenset(x.details), frozenset(x.rules), tuple(x.patterns))
        for x in d.blocks
    }
    cells = {(c.cell.id, c.outcome, c.backend, c.lines, frozenset(c.warnings_added), frozenset(c.rules)) for c in d.cells}
    grid = Grid(SPEC, b, a)
    marks = {r.cell.id: cell_marks(grid.change(r), r) for r in b}
    plain = Grid(SPEC, b)
    own = {r.cell.id: cell_marks(None, r) for r in b}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        job = run_job(hydra_compose(config_name="config", overrides=JOB), JOB)
    job.update(job={"num": 0}, _dir="0")
    header, body, notes = rows([job])
    return (d.summary(), blocks, cells, marks, own, plain.inner_axes, header, body, len(notes)), render(d, "table")


def test_renaming_every_label_changes_text_not_results(monkeypatch):
    before, text_before = _results()
    assert before[0]["selection_changed"] and before[0]["new_warnings"] and any("B" in m for m in before[3].values())
    assert any("!" in m for m in before[4].values()) and before[8]  # warnings marked and gathered
    with monkeypatch.context() as m:
        _rename(m)
        after, text_after = _results()
    assert "kernel block 16 -> 64" in text_before and "kernel block" not in text_after and "«" in text_after
    assert after == before

