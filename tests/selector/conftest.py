"""Selector test helpers: compose through Hydra's context-manager API (no global state leaks)."""

from __future__ import annotations

import pytest
import yaml

from kselect.selector import conformance

from kselect.selector.api import compose
from kselect.selector.resolve import resolve


def select(*overrides: str):
    return resolve(compose(list(overrides)))


@pytest.fixture
def sel():
    return select


@pytest.fixture
def fake_conformance(tmp_path, monkeypatch):
    """Write `<gpu_model>.yaml` with the given claim lines and point the selector at it."""
    monkeypatch.setattr(conformance, "CONFORMANCE_DIR", tmp_path)

    def write(gpu_model: str, claims: str) -> str:
        n = len(yaml.safe_load(f"claims:\n{claims}")["claims"] or {})
        (tmp_path / f"{gpu_model}.yaml").write_text(f"gpu: {gpu_model}\nclaim_count: {n}\nclaims:\n{claims}")
        conformance.load.cache_clear()
        return gpu_model

    yield write
    conformance.load.cache_clear()
