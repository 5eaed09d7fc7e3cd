"""Shared fixtures for the backends tests."""

import sys


import pytest  # noqa: E402


@pytest.fixture
def hide_modules(monkeypatch):
    """hide_modules(*prefixes): make `import <prefix>...` fail as if the package were not installed
    (None in sys.modules), for the rest of the test."""

    def hide(*prefixes):
        for name in list(sys.modules):
            if name.split(".")[0] in prefixes:
                monkeypatch.delitem(sys.modules, name)
        for p in prefixes:
            monkeypatch.setitem(sys.modules, p, None)

    return hide
