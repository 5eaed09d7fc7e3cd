"""Selector test helpers: compose through Hydra's context-manager API (no global state leaks)."""

from __future__ import annotations

import pytest

from selector.api import compose
from selector.resolve import resolve


def select(*overrides: str):
    return resolve(compose(list(overrides)))


@pytest.fixture
def sel():
    return select
