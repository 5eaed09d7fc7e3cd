"""backends/common's descale plumbing: per-layer constants expanded once, never stale."""

import torch

from kselect.backends.common import expand_descale, unit_scale


def test_expanded_once_per_scale_and_shape():
    s = torch.tensor(0.5)
    a = expand_descale(s, 2, 3)
    assert a.shape == (2, 3) and a.dtype == torch.float32 and a.is_contiguous() and bool((a == 0.5).all())
    assert expand_descale(s, 2, 3) is a  # no copy on the next layer call / decode step
    assert expand_descale(s, 4, 3).shape == (4, 3)  # another batch: its own tensor
    per_head = torch.tensor([[1.0, 2.0, 3.0]]).to(torch.bfloat16)
    assert expand_descale(per_head, 1, 3).tolist() == [[1.0, 2.0, 3.0]]
    assert expand_descale(None, 2, 3) is None


def test_a_recalibrated_scale_is_not_stale():
    s = torch.tensor(0.5)
    a = expand_descale(s, 2, 3)
    s.fill_(0.25)  # in place: its version moves
    b = expand_descale(s, 2, 3)
    assert b is not a and bool((b == 0.25).all())
    t = torch.tensor(0.75)  # another tensor (maybe at a freed one's address): never the old entry
    assert bool((expand_descale(t, 2, 3) == 0.75).all())


def test_unit_scale_is_shared():
    assert unit_scale("cpu") is unit_scale("cpu") and float(unit_scale("cpu")) == 1.0


def test_inference_mode_scales_are_memoized():
    with torch.inference_mode():
        s = torch.tensor(0.5)  # the engine loads its scales under inference mode: no version counter
    a = expand_descale(s, 2, 3)
    assert expand_descale(s, 2, 3) is a and bool((a == 0.5).all())
