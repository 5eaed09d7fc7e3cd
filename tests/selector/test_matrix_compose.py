"""The matrix composes group options with Hydra (defaults lists, interpolations): every cell
equals a full compose of its command line."""

from __future__ import annotations

import shutil

from kselect.selector.api import CONF_DIR, compose
from kselect.selector.review.matrix import MatrixSpec, expand, resolve_cells


def test_group_options_with_defaults_lists_and_interpolations(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "model" / "tiny_fp16.yaml").write_text("defaults:\n  - gemma4_tiny\n  - _self_\nname: tiny_fp16\ndtype: float16\n")
    (conf / "model" / "tiny_rel.yaml").write_text(
        "defaults:\n  - gemma4_tiny\n  - _self_\nname: tiny_rel\nintermediate_size: ${.hidden_size}\n"
    )
    spec = MatrixSpec(name="t", axes={"platform": ["cpu"], "model": ["tiny_fp16", "tiny_rel"]})
    res = resolve_cells(expand(spec), conf)
    assert [r.config.model.name for r in res] == ["tiny_fp16", "tiny_rel"]
    assert res[0].config.model.dtype == "float16"
    assert res[1].config.model.intermediate_size == res[1].config.model.hidden_size
    for r in res:
        assert r.config == compose(r.cell.overrides(), conf)


def test_an_option_interpolating_the_root_is_composed_on_its_own(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "model" / "tiny_abs.yaml").write_text(
        "defaults:\n  - gemma4_tiny\n  - _self_\nname: tiny_abs\nintermediate_size: ${model.hidden_size}\n"
    )
    spec = MatrixSpec(name="t", rules="post_pr52987", axes={"platform": ["cpu", "sm90"], "model": ["tiny_abs", "gemma4_tiny"]})
    res = resolve_cells(expand(spec, ("pr48666",)), conf)
    for r in res:
        assert r.config == compose(r.cell.overrides(), conf)
    assert res[0].config.model.intermediate_size == res[0].config.model.hidden_size
