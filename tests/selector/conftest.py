"""Selector test helpers: compose through Hydra's context-manager API (no global state leaks)."""

from __future__ import annotations

import pytest
import yaml

from kselect.selector.api import Evidence, compose, resolve


def select(*overrides: str):
    return resolve(compose(list(overrides)))


@pytest.fixture
def sel():
    return select


@pytest.fixture
def fake_conformance(tmp_path):
    """write(gpu_model, claim lines) -> the Evidence of a conformance file `<gpu_model>.yaml` holding them."""

    def write(gpu_model: str, claims: str) -> Evidence:
        n = len(yaml.safe_load(f"claims:\n{claims}")["claims"] or {})
        (tmp_path / f"{gpu_model}.yaml").write_text(f"gpu: {gpu_model}\nclaim_count: {n}\nclaims:\n{claims}")
        return Evidence(conformance_dir=tmp_path)

    return write
