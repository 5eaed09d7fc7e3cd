"""`platform=auto` keeps the platform keys the command line sets (detection used to drop them)."""

from __future__ import annotations

import pytest

from kselect.selector.config import detect
from kselect.selector.api import compose
from kselect.selector.base.errors import KSelectError

CPU = {"name": "sm90", "vendor": "nvidia", "device": "cuda", "compute_capability": [9, 0], "gpu_model": None,
       "packages": {"fa2": False, "fa3": False, "fa4": False, "flashinfer": False, "triton": False}}  # fmt: skip


@pytest.fixture(autouse=True)
def _cpu_machine(monkeypatch):
    monkeypatch.setattr(detect, "detect_platform", lambda: {**CPU, "packages": dict(CPU["packages"])})


def test_auto_keeps_a_package_override():
    assert compose(["platform=auto"]).platform.packages.triton is False
    cfg = compose(["platform=auto", "platform.packages.triton=true"])
    assert cfg.platform.name == "sm90" and cfg.platform.packages.triton is True


def test_auto_keeps_an_override_equal_to_the_preset_default(monkeypatch):
    monkeypatch.setattr(detect, "detect_platform", lambda: {**CPU, "packages": {**CPU["packages"], "triton": True}})
    assert compose(["platform=auto"]).platform.packages.triton is True  # detected
    assert compose(["platform=auto", "platform.packages.triton=false"]).platform.packages.triton is False


def test_auto_refuses_deleting_a_platform_key():
    with pytest.raises(KSelectError, match=r"~platform.packages.*set .*not deleted"):
        compose(["platform=auto", "~platform.packages"])
