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


def _fp8_case():
    from kselect.kernels.cases import make_case

    return make_case([3, 1], [9, 6], cache_dtype=torch.float8_e4m3fn)


def test_a_quantized_q_from_the_model_is_taken_as_is():
    """q quantized by the model with the backend's own query_scale (the fused q/k/v kernel) gives the same
    output, in the model dtype, as handing the backend q in the model dtype."""
    from dataclasses import replace

    from kselect.backends import make_backend
    from kselect.backends.fixtures import layer_of, make_group, meta_of
    from kselect.kernels.cache_ops import quantize_query

    case = _fp8_case()
    be = make_backend(make_group(kv="fp8_e4m3", head=64, descale="q_k_v"))
    meta, layer = meta_of(case), replace(layer_of(case, q_scale=torch.tensor(0.05)), out_dtype=torch.float32)
    qs = be.query_scale(meta, layer, case.k_cache.dtype)
    assert qs is layer.q_scale
    want = be.forward(case.q, case.k_cache, case.v_cache, meta, layer)
    got = be.forward(quantize_query(case.q, qs, case.k_cache.dtype), case.k_cache, case.v_cache, meta, layer)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    unit = be.query_scale(meta, replace(layer, q_scale=None), case.k_cache.dtype)
    assert unit is unit_scale("cpu")


def test_a_quantized_q_elsewhere_is_refused():
    from dataclasses import replace

    import pytest

    from kselect.backends import make_backend
    from kselect.backends.fixtures import layer_of, make_group, meta_of
    from kselect.kernels.cache_ops import quantize_query

    case = _fp8_case()
    meta, layer = meta_of(case), replace(layer_of(case), out_dtype=torch.float32)
    q8 = quantize_query(case.q, unit_scale("cpu"), case.k_cache.dtype)
    k_v = make_backend(make_group(kv="fp8_e4m3", head=64, descale="k_v"))
    assert k_v.query_scale(meta, layer, case.k_cache.dtype) is None  # q stays in the model dtype
    with pytest.raises(ValueError, match="descale mode is 'k_v'"):
        k_v.forward(q8, case.k_cache, case.v_cache, meta, layer)
    q_k_v = make_backend(make_group(kv="fp8_e4m3", head=64, descale="q_k_v"))
    with pytest.raises(ValueError, match="out dtype None"):  # without the model dtype the output's is unknown
        q_k_v.forward(q8, case.k_cache, case.v_cache, meta, replace(layer, out_dtype=None))
