"""Issue #42: `kselect diff` over the `models` matrix (conf/matrix/models.yaml, the oracle's models grid cell for
cell) renders, and what it reports is what vLLM's own code says. Under the upgrade vllm_0_33_0 -> vllm_0_34_0 (the
first release kselect models these architectures for), a cell becomes valid exactly where vLLM 0.34.0 selects, and
stays refused (its reason changing) exactly where vLLM 0.34.0 refuses, on the committed oracle fixture
(tests/vllm/fixtures/vllm_0_34_0_models_sample.jsonl). test_models_rules.py holds the selections themselves to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kselect.oracle.cells import Cell
from kselect.oracle.compare import load_records

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_34_0_models_sample.jsonl"
DIFF = ["diff", "matrix=models", "a.rules=vllm_0_33_0", "b.rules=vllm_0_34_0"]


def _kselect(*argv: str) -> str:
    p = subprocess.run([sys.executable, "-m", "kselect.cli", *argv], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def matrix_id(c: Cell) -> str:
    """The models matrix's id of an oracle cell (its pins are the backends, lower-cased; TRITON_ATTN is `triton`)."""
    pin = {"auto": None, "TRITON_ATTN": "triton"}.get(c.backend, c.backend.lower())
    return "-".join([c.platform, c.model, c.kv_cache] + ([pin] if pin else []))


@pytest.fixture(scope="module")
def diff() -> dict:
    return json.loads(_kselect(*DIFF, "format=json"))


def test_the_models_diff_renders():
    md = _kselect(*DIFF, "format=markdown")
    assert "over matrix models (680 cells)" in md, md[:500]
    assert "vllm_0_34_0_models" in md  # the release overlay that brings the architectures in, named in the steps


def test_it_reports_what_vllms_own_code_selects(diff):
    records = load_records(FIXTURE)
    assert len(records) >= 60
    ids = {matrix_id(Cell.from_dict(r["cell"])): r for r in records}
    valid = {c for b in diff["blocks"] if b["kind"] == "became_valid" for c in b["cells"]}
    refused = {c for b in diff["blocks"] if b["kind"] == "error_changed" for c in b["cells"]}
    assert diff["summary"]["cells"] == 680
    assert {i for i, r in ids.items() if not r.get("error")} == valid & set(ids)
    assert {i for i, r in ids.items() if r.get("error")} == refused & set(ids)
