"""The environment matrix: declaration, expansion, skips by declaration, invalid cells, and the
fast path (one compose per overlay set + model_copy) agreeing with a full Hydra compose."""

from __future__ import annotations


import pytest

from kselect.selector.api import compose
from kselect.selector.base.errors import SelectionError, one_line
from kselect.selector.review.matrix import (
    Builder,
    Cell,
    MatrixError,
    MatrixSpec,
    expand,
    load_matrix,
    parse_overlays,
    resolve_cells,
    resolve_named,
    skipped,
)
from kselect.selector.api import resolve


def test_default_matrix_shape():
    spec = load_matrix("default")
    cells = expand(spec)
    assert 5000 <= len(cells) <= 6000
    assert len({c.id for c in cells}) == len(cells)
    # calibrated scales on a non-FP8 cache are skipped by declaration, never expanded
    assert not [c for c in cells if c.scales == "calibrated" and c.kv_cache == "auto"]
    assert skipped(spec) and all("FP8" in reason for _, reason in skipped(spec))
    assert {c.pin for c in cells} == {"auto", "fa3", "triton", "bs16"}


def test_ids_are_readable():
    spec = load_matrix("smoke")
    ids = {c.with_overlays(["pr48666"]).id for c in expand(spec)}
    assert "sm90-gemma4_31b-fp8-mtp-pr48666" in ids
    assert "sm90-gemma4_31b-fp8-calib-mtp-mm-pr48666" in ids
    assert "cpu-gemma4_tiny-auto" in {c.id for c in expand(spec)}
    assert Cell("sm90", "gemma4_31b", "float16", "fp8", "calibrated", "mtp", True, "fa3").id == "sm90-gemma4_31b-fp16-fp8-calib-mtp-mm-fa3"


def test_invalid_cells_are_results_not_exceptions():
    res = resolve_named("default")
    invalid = [r for r in res if r.outcome == "invalid"]
    # a TRITON_ATTN pin on a CPU: the pin is validated alone, no fallback
    assert invalid and all(r.selection is None and r.error for r in invalid)
    cpu_triton = [r for r in invalid if r.cell.platform == "cpu" and r.cell.pin == "triton"]
    assert cpu_triton and "TRITON_ATTN" in cpu_triton[0].error and cpu_triton[0].rejected


def test_undeclared_invalid_combination_is_a_matrix_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("axes: {platform: [sm90], model: [gemma4_31b], kv_cache: [auto, fp8], scales: [calibrated]}\n")
    spec = load_matrix(p)
    with pytest.raises(MatrixError, match=r"sm90-gemma4_31b-auto-calib is not a valid config: .*kv_cache.scales.*skip:"):
        resolve_cells(expand(spec))
    p.write_text(p.read_text() + "skip: [{when: {kv_cache: auto, scales: calibrated}, reason: needs FP8}]\n")
    assert [r.cell.id for r in resolve_cells(expand(load_matrix(p)))] == ["sm90-gemma4_31b-fp8-calib"]


def test_bad_pins_and_axes_fail_with_the_key(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("axes: {platform: [sm90], model: [gemma4_31b]}\npins: {nope: {attention.backend: NOPE}}\n")
    with pytest.raises(MatrixError, match="attention.backend='NOPE' is not a backend"):
        resolve_cells(expand(load_matrix(p)))
    p.write_text("axes: {platform: [sm90], model: [gemma4_31b], kv: [fp8]}\n")
    with pytest.raises(MatrixError, match="unknown axis 'kv'"):
        load_matrix(p)
    p.write_text("axes: {platform: [sm90], model: [gemma4_31b]}\nskip: [{when: {platform: sm91}, reason: x}]\n")
    with pytest.raises(MatrixError, match="sm91"):
        load_matrix(p)
    with pytest.raises(MatrixError, match="available: .*default.*smoke"):
        load_matrix("nope")


def test_missing_group_file_names_the_options():
    spec = MatrixSpec(axes={"platform": ["sm91"], "model": ["gemma4_31b"]})
    with pytest.raises(MatrixError, match="platform='sm91'.*available: .*sm90"):
        resolve_cells(expand(spec))


# cells chosen to cover every axis, pins, an invalid cell and calibrated MTP
SAMPLE = [
    ("sm90-gemma4_31b-bf16-fp8-calib-mtp-mm", ("pr48666",)),
    ("sm90-gemma4_26b_a4b-fp16-fp8_e4m3-fa3", ()),
    ("sm100-gemma4_e2b-bf16-auto-mtp-bs16", ("pr53175",)),
    ("cpu-gemma4_e4b-bf16-fp8_e5m2-triton", ()),  # invalid
    ("xpu-gemma4_31b-fp16-fp8-calib-mm", ("pr48666", "pr52987")),
    ("sm90-gemma4_e4b-bf16-fp8-mm-fa3", ("pr48666",)),  # invalid under pr48666
]


@pytest.mark.parametrize("cid, overlays", SAMPLE, ids=[f"{c}-{'+'.join(o) or 'base'}" for c, o in SAMPLE])
def test_fast_path_equals_hydra_compose(cid, overlays):
    """The matrix's fast path (one compose, model_copy) and `kselect select <overrides>`
    give the same selection, or the same error."""
    cell = next(c for c in expand(load_matrix("seed")) if c.id == cid).with_overlays(overlays)
    [fast] = resolve_cells([cell])
    cfg = compose(cell.overrides())
    assert fast.config == cfg
    try:
        slow = resolve(cfg)
    except SelectionError as e:
        assert fast.selection is None and fast.error == one_line(str(e))  # the failure with its reasons
        return
    assert fast.selection == slow


def test_overlay_patches_environment_like_hydra(tmp_path):
    """An overlay that writes into an environment group (platform.packages.fa4: false) reaches
    every cell, as Hydra's defaults order makes it."""
    import shutil

    from kselect.selector.api import CONF_DIR

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "overlay" / "nofa4.yaml").write_text("# @package _global_\nplatform:\n  packages: {fa4: false}\n")
    cell = Cell("sm90", "gemma4_31b", kv_cache="fp8", overlays=("nofa4",))
    [r] = resolve_cells([cell], conf_dir=conf)
    assert r.config.platform.packages.fa4 is False
    assert r.selection == resolve(compose(cell.overrides(), conf))
    assert {g.backend for g in r.selection.groups} == {"TRITON_ATTN"}  # gemma4-force_triton_without_fa4


def test_one_compose_per_overlay_set(monkeypatch):
    import kselect.selector.review.configs as m

    calls = []
    real = m.compose_raw
    monkeypatch.setattr(m, "compose_raw", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(m, "_COMPOSED", {})  # composes are shared per process: start from none
    cells = expand(load_matrix("seed_smoke"))
    b = Builder()
    resolve_cells([c.with_overlays(ov) for ov in ((), ("pr48666",)) for c in cells], builder=b)
    resolve_cells(cells, builder=b)
    assert len(calls) == 2


def test_default_matrix_resolves_every_cell():
    """5,000+ cells, each a result (its time is kselect/measurement/selector/timing.py's, not a test's)."""
    res = resolve_named("seed", ("pr53175",))
    assert len(res) > 5000
    assert all(r.selection is not None or r.failure is not None for r in res)


def test_parse_overlays():
    assert parse_overlays("[]") == ()
    assert parse_overlays("[pr48666, pr52987]") == ("pr48666", "pr52987")
    assert parse_overlays("pr53175") == ("pr53175",)


def test_nested_pin_reproduces_with_hydra():
    """A pin below a group key the file lacks (backend_per_kind.<kind>) is set with ++."""
    cell = Cell("sm90", "gemma4_31b", kv_cache="fp8", pin="tri", pin_sets=(("attention.backend_per_kind.full_attention", "TRITON_ATTN"),))
    assert "++attention.backend_per_kind.full_attention=TRITON_ATTN" in cell.overrides()
    [r] = resolve_cells([cell])
    assert r.selection == resolve(compose(cell.overrides()))
    assert r.selection.group("full_attention").backend == "TRITON_ATTN"
