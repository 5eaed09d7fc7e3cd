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


def test_early_release_is_a_constexpr_value_only_where_pdl_is_on(sm90):
    """early(): kernels launched with PDL get PDL == EARLY (release, then wait); a plain launch stays plain, and the
    switch restores on exit and on errors."""
    t = fake_cuda_tensor()
    with pdl.early():
        assert pdl.args(t) == {"PDL": False}  # not asked for PDL: nothing to release early
        with pdl.on():
            assert pdl.args(t) == {"PDL": pdl.EARLY, "launch_pdl": True} and pdl.EARLY not in (True, False)
            with pdl.early(False):
                assert pdl.args(t)["PDL"] is True
    with pdl.on():
        assert pdl.args(t)["PDL"] is True
        with pytest.raises(RuntimeError), pdl.early():
            raise RuntimeError("boom")
        assert pdl.args(t)["PDL"] is True


def test_late_release_only_for_kernels_with_a_late_point(sm90):
    """late(): a kernel that calls release_late (args(..., late=True)) gets PDL == LATE; any other keeps PDL on (it
    would never release otherwise); early() wins; a plain launch stays plain."""
    t = fake_cuda_tensor()
    with pdl.late():
        assert pdl.args(t, late=True) == {"PDL": False}
        with pdl.on():
            assert pdl.args(t, late=True) == {"PDL": pdl.LATE, "launch_pdl": True}
            assert pdl.LATE not in (True, False, pdl.EARLY)
            assert pdl.args(t)["PDL"] is True
            with pdl.early():
                assert pdl.args(t, late=True)["PDL"] == pdl.EARLY
    with pdl.on():
        assert pdl.args(t, late=True)["PDL"] is True
