"""make_backend mapping, clear errors for missing kernels, and the reference backend adapter."""

import sys

import pytest
import torch

from kselect.backends import BackendUnavailableError, LayerParams, make_backend
from kselect.backends.base import AttentionMetadata
from kselect.backends.reference import TorchReferenceBackend
from kselect.kernels.cache_ops import quantize_query
from kselect.kernels.cases import make_case
from kselect.kernels.tolerances import rel_err
from kselect.backends.fixtures import make_group, meta_of


def group(backend="TORCH_REFERENCE", version=None, head=64, kv="float32", kernel_block=16, kv_block=16,
          descale="none", quant_query=False):
    return make_group(backend, version, head, kv, kernel_block, kv_block, descale)


def test_reference_backend_is_made():
    assert isinstance(make_backend(group()), TorchReferenceBackend)
    assert make_backend(group()).name == "TORCH_REFERENCE"


@pytest.mark.parametrize("name", ["FLEX_ATTENTION", "TURBOQUANT"])
def test_unimplemented_backends_raise(name):
    with pytest.raises(BackendUnavailableError, match=name):
        make_backend(group(name))


def test_unknown_names_and_versions_raise():
    with pytest.raises(BackendUnavailableError, match="FLASH_ATTN v2"):
        make_backend(group("FLASH_ATTN", 2))
    with pytest.raises(BackendUnavailableError, match="unknown attention backend 'NOPE'"):
        make_backend(group("NOPE"))


def test_fa3_missing_names_package(hide_modules):
    hide_modules("vllm", "flash_attn_interface", "flash_attn_3")
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(group("FLASH_ATTN", 3, head=256, kv="bfloat16"))
    msg = str(e.value)
    assert "FLASH_ATTN v3" in msg and "vllm.vllm_flash_attn" in msg and "vllm" in msg.split(": ", 1)[1]
    assert "\n" not in msg


@pytest.mark.parametrize("head,kv,module", [(256, "bfloat16", "flash_attn.cute"), (512, "bfloat16", "vllm.vllm_flash_attn"),
                                            (256, "fp8_e4m3", "vllm.vllm_flash_attn")])
def test_fa4_missing_names_the_right_build(hide_modules, head, kv, module):
    hide_modules("vllm", "flash_attn")
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(group("FLASH_ATTN", 4, head=head, kv=kv))
    assert "FLASH_ATTN v4" in str(e.value) and module in str(e.value)


def test_triton_missing(monkeypatch, hide_modules):
    hide_modules("triton")
    from kselect import kernels

    monkeypatch.delitem(sys.modules, "kselect.kernels.triton_paged", raising=False)
    monkeypatch.delattr(kernels, "triton_paged", raising=False)
    with pytest.raises(BackendUnavailableError, match="TRITON_ATTN needs the triton package"):
        make_backend(group("TRITON_ATTN"))


@pytest.mark.parametrize("kv_block,kernel_block", [(64, 16), (128, 32), (32, 32)])
def test_kernel_block_reindexing(kv_block, kernel_block):
    case = make_case([3, 1, 5], [70, 33, 5], block_size=kv_block, window_left=20, sinks=True)
    be = make_backend(group(kernel_block=kernel_block, kv_block=kv_block))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case),
                     LayerParams(case.softmax_scale, window_left=20, sinks=case.sinks))
    assert rel_err(out, case.reference()) < 1e-6


def _table_meta(rows):
    table = torch.tensor(rows, dtype=torch.int32)
    return AttentionMetadata(torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([4, 2], dtype=torch.int32),
                             table, 1, 4)


def test_kernel_block_view_indices():
    from kselect.backends.common import kernel_block_view
    kc = torch.arange(3 * 4).float().view(3, 4, 1, 1)
    kv, vv, bt = kernel_block_view(kc, kc, _table_meta([[2, 0], [1, -1]]), 2)
    assert bt.tolist() == [[4, 5, 0, 1], [2, 3, -1, -1]]
    assert kv[4].flatten().tolist() == [8.0, 9.0] and kv.data_ptr() == kc.data_ptr()


def test_kernel_block_table_is_made_once_a_step():
    """Every layer of a step reads one expanded table; begin_step() (the model's forward) or a new table
    tensor makes it again, so the next step's blocks are read."""
    from kselect.backends.common import kernel_block_view
    kc = torch.zeros(3, 4, 1, 1)
    meta = _table_meta([[2, 0], [1, -1]])
    bt = kernel_block_view(kc, kc, meta, 2)[2]
    assert kernel_block_view(kc, kc, meta, 2)[2] is bt  # the step's other layers
    assert kernel_block_view(kc, kc, meta, 4)[2] is meta.block_table  # kernel block = kv block: no table made
    meta.block_table[1, 1] = 2  # the next step's block, written in place as the engine's static tables are
    meta.begin_step()
    assert kernel_block_view(kc, kc, meta, 2)[2].tolist() == [[4, 5, 0, 1], [2, 3, 4, 5]]
    meta.block_table = torch.tensor([[0, 1], [2, -1]], dtype=torch.int32)
    assert kernel_block_view(kc, kc, meta, 2)[2].tolist() == [[0, 1, 2, 3], [4, 5, -1, -1]]


@pytest.mark.parametrize("mode", ["q_k_v", "k_v", "kv_dequant"])
@pytest.mark.parametrize("per_head", [False, True])
def test_reference_backend_fp8_descale_modes(mode, per_head):
    case = make_case([4, 1], [20, 9], dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn,
                     descale="seq_head" if per_head else "layer")
    qs = torch.tensor(0.02)
    layer = LayerParams(case.softmax_scale, k_scale=case.k_descale, v_scale=case.v_descale, q_scale=qs)
    be = make_backend(group(kv="fp8_e4m3", descale=mode, quant_query=mode == "q_k_v"))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer)
    assert out.dtype == torch.bfloat16
    if mode == "q_k_v":
        q8 = quantize_query(case.q, qs)
        ref = case.reference(q=q8, q_descale=qs)
        assert rel_err(out, ref) < 1e-2
        assert rel_err(out, case.reference()) < 6e-2  # quantizing q costs accuracy, not correctness
    else:
        assert rel_err(out, case.reference()) < 1e-2
