"""TRITON_FLASH_ATTN / TRITON_FLASHINFER on CPU: routing per batch, one cache for both children,
and a one-line refusal when a child's package is missing. The children's kernels run on the H200
(tests/kernels/test_gpu_paths.py `tfa_*`); here both children are stand-ins on the fp32 reference
that record which one ran, so what is tested is the composite's routing and plumbing."""

import pytest
import torch

from kselect.backends import BackendUnavailableError, make_backend, registry
from kselect.backends.composite import CompositeBackend, needs_mm_prefix
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.backends.reference import TorchReferenceBackend
from kselect.kernels.cases import make_case
from kselect.kernels.tolerances import rel_err

RAN: list[str] = []


class _Recording(TorchReferenceBackend):
    def forward(self, q, k_cache, v_cache, meta, layer):
        RAN.append(f"{self.group.backend}:{self.group.descale}")
        return super().forward(q, k_cache, v_cache, meta, layer)


@pytest.fixture
def stand_ins(monkeypatch):
    here = f"{__name__}:_Recording"
    for key in (("TRITON_ATTN", None), ("FLASH_ATTN", 3), ("FLASH_ATTN", 4), ("FLASHINFER", None)):
        monkeypatch.setitem(registry._IMPLS, key, here)
    RAN.clear()
    yield RAN


def _case(q_lens, kv_lens, spans):
    return make_case(q_lens, kv_lens, block_size=64, window_left=40, mm_spans=spans)


@pytest.mark.parametrize(
    "q_lens, kv_lens, spans, expect",
    [
        ([90, 30], [90, 30], [[(10, 50)], []], True),          # a prefill over an image span
        ([1, 1], [90, 30], [[(10, 50)], []], False),           # decode: spans are history
        ([20, 5], [120, 30], [[(10, 50)], []], False),         # a chunk after the span
        ([40, 5], [60, 30], [[(10, 50)], []], True),           # a chunk that cuts into the span
        ([40, 5], [60, 30], None, False),                      # text only
    ],
)
def test_routing(q_lens, kv_lens, spans, expect):
    assert needs_mm_prefix(meta_of(_case(q_lens, kv_lens, spans))) is expect


@pytest.mark.parametrize("name, causal, version", [("TRITON_FLASH_ATTN", "FLASH_ATTN", 3),
                                                   ("TRITON_FLASHINFER", "FLASHINFER", None)])
def test_batches_go_to_the_right_child_and_match_the_reference(stand_ins, name, causal, version):
    be = make_backend(make_group(name, version, kernel_block=64, kv_block=64))
    assert isinstance(be, CompositeBackend) and be.name == name
    for q_lens, kv_lens, spans, child in (([90, 30], [90, 30], [[(10, 50)], []], "TRITON_ATTN"),
                                          ([1, 1], [91, 31], [[(10, 50)], []], causal)):
        case = _case(q_lens, kv_lens, spans)
        stand_ins.clear()
        out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
        assert stand_ins == [f"{child}:none"]
        assert rel_err(out, case.reference()) < 1e-6


def test_triton_child_quantizes_q_only_with_the_composite(stand_ins):
    """SM90 FP8: the head-512 group runs FA4's in-kernel dequant (no quantized q), so the Triton child
    takes K/V descales only; the head-256 group quantizes q in both children."""
    full = CompositeBackend(make_group("TRITON_FLASH_ATTN", 4, head=512, kv="fp8_e4m3", kernel_block=64, kv_block=128,
                                       descale="kv_dequant"))
    assert (full.general.group.descale, full.causal.group.descale) == ("k_v", "kv_dequant")
    sliding = CompositeBackend(make_group("TRITON_FLASH_ATTN", 3, head=256, kv="fp8_e4m3", kernel_block=64, kv_block=64,
                                          descale="q_k_v"))
    assert (sliding.general.group.descale, sliding.causal.group.descale) == ("q_k_v", "q_k_v")
    assert sliding.general.group.flash_attn_version is None and sliding.causal.group.flash_attn_version == 3
    # so the composite's own group says whether q arrives quantized, for either child, without routing the batch
    case = make_case([1], [20], block_size=64, cache_dtype=torch.float8_e4m3fn)
    meta, layer = meta_of(case), layer_of(case, q_scale=torch.tensor(0.5))
    for be, want in ((full, None), (sliding, layer.q_scale)):
        got = [b.query_scale(meta, layer, torch.float8_e4m3fn) for b in (be, be.general, be.causal)]
        assert all(g is want for g in got), (be.group.descale, got)


def test_a_missing_child_fails_in_one_line(hide_modules, monkeypatch):
    monkeypatch.setitem(registry._IMPLS, ("TRITON_ATTN", None), f"{__name__}:_Recording")
    hide_modules("vllm", "flash_attn", "flash_attn_interface", "flash_attn_3")
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(make_group("TRITON_FLASH_ATTN", 3, head=256, kv="bfloat16"))
    msg = str(e.value)
    assert msg.startswith("TRITON_FLASH_ATTN needs FLASH_ATTN: ") and "\n" not in msg
