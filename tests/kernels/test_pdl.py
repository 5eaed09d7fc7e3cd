"""kernels/pdl.py: kernels launch plainly unless a caller asks for PDL (on), an enclosing off() wins, SM90+ only."""

from types import SimpleNamespace

import pytest
import torch

from kselect.kernels import pdl


def fake_cuda_tensor():
    return SimpleNamespace(is_cuda=True, device=SimpleNamespace(index=0))


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(pdl, "_supported", lambda index: True)


def test_plain_unless_asked(sm90):
    assert pdl.args(fake_cuda_tensor()) == {"PDL": False} and not pdl.active()
    with pdl.on():
        assert pdl.args(fake_cuda_tensor()) == {"PDL": True, "launch_pdl": True}
        assert pdl.args(torch.zeros(1)) == {"PDL": False}  # CPU tensors: Triton's interpreter
    assert not pdl.active()


def test_only_on_sm90_and_later(monkeypatch):
    monkeypatch.setattr(pdl, "_supported", lambda index: False)
    with pdl.on():
        assert pdl.args(fake_cuda_tensor()) == {"PDL": False}


def test_off_wins_over_an_inner_on_and_both_restore_even_on_errors(sm90):
    t = fake_cuda_tensor()
    with pdl.off():
        with pdl.on():  # a forward asking for PDL inside a profile that launches plainly
            assert not pdl.enabled(t)
            with pdl.off():
                assert not pdl.enabled(t)
            assert not pdl.enabled(t)
    with pdl.on():
        with pdl.off():
            assert not pdl.enabled(t)
        assert pdl.enabled(t)  # the inner off's exit restores the outer on
        with pytest.raises(RuntimeError), pdl.off():
            raise RuntimeError("boom")
        assert pdl.enabled(t)
    with pytest.raises(RuntimeError), pdl.on():
        raise RuntimeError("boom")
    assert not pdl.active()
