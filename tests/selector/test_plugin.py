"""The pytest plugin: `@pytest.mark.kselect_matrix(...)` + the `kselect_cell` fixture, ids
selectable with -k, `--kselect-matrix=NAME`. A real parametrized test first, then pytester."""

from __future__ import annotations

import pytest

from kselect.selector.review.pytest_plugin import CellCase

# ---------------------------------------------------------------- a real test over the smoke matrix


@pytest.mark.kselect_matrix("smoke", rules="post_pr52987", overlays=[[], ["pr48666"]])
def test_selection_invariants(kselect_cell):
    cell, cfg, sel = kselect_cell
    assert isinstance(kselect_cell, CellCase) and kselect_cell.error is None
    e = sel.environment
    assert (e["platform"], e["model"], e["kv_cache_dtype"]) == (cell.platform, cell.model, cell.kv_cache)
    assert e["overlays"] == list(cell.overlays) == list(cfg.overlays)
    assert cfg.spec_decode.method == cell.spec_decode and cfg.model.multimodal == cell.multimodal
    for g in sel.groups:
        assert g.kv_block_size % g.kernel_block_size == 0
        if g.draft:
            target = sel.group(g.kind)
            assert (g.backend, g.kv_block_size) == (target.backend, target.kv_block_size)


@pytest.mark.kselect_matrix("models", where={"platform": "sm90", "kv_cache": "fp8"})
def test_models_matrix_cells(kselect_cell):
    # issue #42: the plugin over other model families (a slice: SM90, FP8 KV); every group's kernel block divides
    # its KV block, and a fixed-kind group (mamba state, indexer cache) takes the cache block
    cell, cfg, sel = kselect_cell
    if kselect_cell.error is not None:
        pytest.skip(kselect_cell.error)
    assert sel.environment["model"] == cell.model and cfg.model.architecture == "hf"
    for g in sel.groups:
        assert g.kv_block_size % g.kernel_block_size == 0
        if g.kind in ("mamba", "mla_indexer"):
            assert g.kv_block_size == sel.block_size


# ---------------------------------------------------------------- pytester

# the plugin under test; the inner sessions skip plugins they do not need (hypothesis's
# terminal summary alone costs seconds the first time)
PLUGIN = ("-p", "kselect.selector.review.pytest_plugin", "-p", "no:hypothesispytest", "-p", "no:cacheprovider", "-p", "no:benchmark")

TEST_FILE = """
import pytest

@pytest.mark.kselect_matrix("smoke", rules="post_pr52987", overlays=[[], ["pr48666"]])
def test_cell(kselect_cell):
    cell, cfg, sel = kselect_cell
    assert sel.environment["model"] == cell.model

@pytest.mark.kselect_matrix("smoke", where={"platform": "sm90", "kv_cache": "fp8", "multimodal": True})
def test_where(kselect_cell):
    assert kselect_cell.cell.platform == "sm90"

def test_no_marker(kselect_cell):
    assert kselect_cell.cell.overlays == ()
"""


def _ids(result) -> list[str]:
    return [line.strip() for line in result.outlines if "::" in line]


def test_ids_k_selection_and_option(pytester):
    pytester.makepyfile(test_m=TEST_FILE)
    r = pytester.runpytest(*PLUGIN, "--collect-only", "-q")
    ids = _ids(r)
    assert len([i for i in ids if "::test_cell[" in i]) == 96  # 48 cells x 2 overlay sets
    assert "test_m.py::test_cell[sm90-gemma4_31b-fp8-mtp-pr48666]" in ids
    assert "test_m.py::test_cell[cpu-gemma4_tiny-auto]" in ids
    assert len([i for i in ids if "::test_where[" in i]) == 2 * 2 * 2  # models x scales x spec_decode
    assert len([i for i in ids if "::test_no_marker[" in i]) == 48
    r = pytester.runpytest(*PLUGIN, "-k", "sm90-gemma4_31b-fp8-mtp-pr48666 or test_where")
    r.assert_outcomes(passed=1 + 8)
    # --kselect-matrix names another matrix for every marked test (golden: x2 for the bs16 pin)
    r = pytester.runpytest(*PLUGIN, "--kselect-matrix=golden", "--collect-only", "-q", "-k", "test_where")
    assert len(_ids(r)) == 2 * 8
    r = pytester.runpytest(*PLUGIN, "--kselect-matrix=nope", "--collect-only", "-q")
    assert r.ret != 0 and "no matrix 'nope'" in "\n".join(r.outlines + r.errlines)


def test_invalid_cells_skip_or_include(pytester):
    pytester.makefile(".yaml", m="axes: {platform: [cpu, sm90], model: [gemma4_31b]}\npins: {triton: {attention.backend: TRITON_ATTN}}\n")
    path = pytester.path / "m.yaml"
    pytester.makepyfile(
        test_inv=f"""
import pytest

@pytest.mark.kselect_matrix({str(path)!r})
def test_skip(kselect_cell):
    assert kselect_cell.selection is not None

@pytest.mark.kselect_matrix({str(path)!r}, invalid="include")
def test_include(kselect_cell):
    cell, cfg, sel = kselect_cell
    if cell.platform == "cpu":
        assert sel is None and "TRITON_ATTN" in kselect_cell.error
    else:
        assert sel.groups[0].backend == "TRITON_ATTN"
"""
    )
    r = pytester.runpytest(*PLUGIN, "-rs")
    r.assert_outcomes(passed=3, skipped=1)
    assert any("invalid cell cpu-gemma4_31b-triton" in line for line in r.outlines)


def test_bad_marker_arguments(pytester):
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.kselect_matrix("smoke", where={"gpu": "sm90"})
def test_x(kselect_cell):
    pass
"""
    )
    r = pytester.runpytest(*PLUGIN, "--collect-only")
    assert r.ret != 0 and "unknown axes ['gpu']" in "\n".join(r.outlines + r.errlines)
