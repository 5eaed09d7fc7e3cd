"""kernels/pdl.py: which launches get programmatic dependent launch, and the switch that turns it off."""

from types import SimpleNamespace

import pytest
import torch

from kselect.kernels import pdl


def fake_cuda_tensor():
    return SimpleNamespace(is_cuda=True, device=SimpleNamespace(index=0))


def test_cpu_tensors_launch_plainly():
    assert pdl.args(torch.zeros(1)) == {"PDL": False}


@pytest.mark.parametrize("capable,want", [(True, {"PDL": True, "launch_pdl": True}), (False, {"PDL": False})])
def test_sm90_devices_launch_with_pdl(monkeypatch, capable, want):
    monkeypatch.setattr(pdl, "_supported", lambda index: capable)
    assert pdl.args(fake_cuda_tensor()) == want


def test_off_switches_it_off_and_back_even_on_errors(monkeypatch):
    monkeypatch.setattr(pdl, "_supported", lambda index: True)
    t = fake_cuda_tensor()
    with pdl.off():
        assert pdl.args(t) == {"PDL": False}
        with pdl.off():
            assert not pdl.enabled(t)
        assert not pdl.enabled(t)  # the inner exit restores off, not on
    assert pdl.enabled(t)
    with pytest.raises(RuntimeError), pdl.off():
        raise RuntimeError("boom")
    assert pdl.enabled(t)
