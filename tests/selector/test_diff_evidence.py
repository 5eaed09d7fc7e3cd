"""Evidence is an explicit input: each side of a diff reads its own conf tree's conformance (and perf) data,
and a selection is a function of (config, evidence)."""

from __future__ import annotations

import shutil

import yaml

from kselect.selector.api import CONF_DIR, Evidence, compose, resolve
from kselect.selector.review.diff import Source, run_diff
from kselect.selector.review.matrix import MatrixSpec

OVERRIDES = ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"]
SPEC = MatrixSpec(name="ev", axes={"platform": ["sm90"], "model": ["gemma4_31b"], "kv_cache": ["fp8"]})


def _verified_claim() -> str:
    """A claim the bundled conformance data verifies for the full-attention group of OVERRIDES."""
    g = resolve(compose(OVERRIDES), Evidence.load(CONF_DIR)).group("full_attention")
    return next(c.claim for c in g.claims if c.status == "verified")


def _tree_refuting(tmp_path, name: str, claim: str):
    """A copy of conf/ whose nvidia_h200 conformance file says `claim` was refuted."""
    d = tmp_path / name / "conf"
    shutil.copytree(CONF_DIR, d, ignore=shutil.ignore_patterns("perf"))
    f = d / "conformance" / "nvidia_h200.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["claims"][claim] = {"status": "refuted", "rel_err": 0.5, "detail": "wrong output"}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


def test_a_selection_reads_the_evidence_it_is_given(tmp_path):
    claim = _verified_claim()
    other = Evidence.load(_tree_refuting(tmp_path, "b", claim))
    cfg = compose(OVERRIDES)
    status = lambda ev: {c.claim: c.status for c in resolve(cfg, ev).group("full_attention").claims}[claim]  # noqa: E731
    assert status(Evidence.load(CONF_DIR)) == "verified"
    assert status(other) == "refuted"
    assert status(Evidence.none()) == "unverified"


def test_each_side_of_a_diff_reads_its_own_conformance_data(tmp_path):
    claim = _verified_claim()
    a = tmp_path / "a" / "conf"
    shutil.copytree(CONF_DIR, a, ignore=shutil.ignore_patterns("perf"))
    b = _tree_refuting(tmp_path, "b", claim)
    d = run_diff(Source("a", a, ()), Source("b", b, ()), SPEC)
    warn = [blk for blk in d.blocks if blk.kind == "new_warning"]
    assert [blk.key for blk in warn] == [("claims_refuted", "nvidia_h200")]
    assert [c.claim for c in warn[0].details[0][0].claims] == [claim]
    # and the other way round: b's refutation is gone on a's side, a's data never leaks into b's
    back = run_diff(Source("b", b, ()), Source("a", a, ()), SPEC)
    assert not [blk for blk in back.blocks if blk.kind == "new_warning" and blk.key[0] == "claims_refuted"]
    same = run_diff(Source("a", a, ()), Source("a2", a, ()), SPEC)
    assert not same.changed
