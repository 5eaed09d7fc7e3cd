"""FLASHINFER adapter on CPU: page-list conversion, plan reuse, scales and refusals.

The kernel itself runs on the H200 (tests/kernels/test_gpu_paths.py, conformance). Here a stand-in
`flashinfer` module implements the documented contract of BatchPrefillWithPagedKVCacheWrapper
(plan: CSR page lists, causal, sm_scale, window_left; run: sm_scale *= k_scale, out *= v_scale) on
the fp32 reference, so what is tested is the adapter's mapping onto that contract.
"""

import sys
import types

import pytest
import torch

from kselect.backends import BackendUnavailableError, LayerParams, make_backend
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.kernels.cases import make_case
from kselect.kernels.flashinfer import paged_kv_layout
from kselect.kernels.reference import paged_attention
from kselect.kernels.tolerances import rel_err


class _Wrapper:
    plans = 0
    made: list = []
    launch = staticmethod(lambda pages: "fixed")  # what `_plan_info` holds after a plan

    def __init__(self, workspace, layout, backend="auto", use_cuda_graph=False, **bufs):
        assert layout == "NHD" and workspace.dtype == torch.uint8
        self.graph, self.bufs = use_cuda_graph, bufs
        type(self).made.append(self)

    def plan(self, qo_indptr, kv_indptr, kv_indices, last_len, hq, hkv, d, page, *, causal, sm_scale, window_left,
             q_data_type, kv_data_type, o_data_type):
        type(self).plans += 1
        b = kv_indptr.numel() - 1
        n = (kv_indptr[1:] - kv_indptr[:-1]).tolist()
        if self.graph:  # fixed buffers: the batch and the page count must fit
            assert b + 1 == self.bufs["qo_indptr_buf"].numel() and sum(n) <= self.bufs["paged_kv_indices_buf"].numel()
        self._plan_info = type(self).launch(sum(n))
        table = torch.full((b, max(n + [1])), -1, dtype=torch.int32)
        for i in range(b):
            table[i, :n[i]] = kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
        lens = torch.tensor([(k - 1) * page + last if k else 0 for k, last in zip(n, last_len.tolist())])
        self.p = dict(cu=qo_indptr, lens=lens.to(torch.int32), table=table, causal=causal, scale=sm_scale,
                      window=window_left, dtypes=(q_data_type, kv_data_type, o_data_type))

    def run(self, q, kv, *, k_scale=None, v_scale=None):
        p = self.p
        assert (q.dtype, kv[0].dtype) == p["dtypes"][:2]
        scale = p["scale"] * (1.0 if k_scale is None else k_scale)
        out = paged_attention(q, kv[0], kv[1], p["cu"], p["lens"], p["table"], scale, causal=p["causal"],
                              window_left=p["window"], out_dtype=p["dtypes"][2])
        return out * (1.0 if v_scale is None else v_scale)


@pytest.fixture
def fake_flashinfer(monkeypatch):
    _Wrapper.plans, _Wrapper.made = 0, []
    monkeypatch.setattr(_Wrapper, "launch", staticmethod(lambda pages: "fixed"))
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(BatchPrefillWithPagedKVCacheWrapper=_Wrapper))
    return _Wrapper


def test_paged_kv_layout():
    table = torch.tensor([[7, 2, 9], [4, -1, -1], [5, 6, -1]], dtype=torch.int32)
    indptr, indices, last = paged_kv_layout(table, torch.tensor([33, 16, 17]), 16)
    assert indptr.tolist() == [0, 3, 4, 6]
    assert indices.tolist() == [7, 2, 9, 4, 5, 6]
    assert last.tolist() == [1, 16, 1]
    with pytest.raises(ValueError, match="needs 4"):
        paged_kv_layout(table, torch.tensor([49, 1, 1]), 16)


@pytest.mark.parametrize("window", [-1, 7])
@pytest.mark.parametrize("kv", ["float32", "fp8_e4m3"])
def test_adapter_matches_reference_and_plans_once_per_batch(fake_flashinfer, window, kv):
    fp8 = kv.startswith("fp8")
    case = make_case([9, 1, 4], [40, 17, 4], d=64, block_size=32, window_left=window,
                     dtype=torch.bfloat16 if fp8 else torch.float32,
                     cache_dtype=torch.float8_e4m3fn if fp8 else None, descale="layer")
    be = make_backend(make_group("FLASHINFER", None, 64, kv, 16, 32, "k_v" if fp8 else "none"))
    meta = meta_of(case)
    for _ in range(3):  # three layers of one group share the batch metadata: one plan
        out = be.forward(case.q, case.k_cache, case.v_cache, meta, layer_of(case))
        assert rel_err(out, case.reference(out_dtype=torch.float32)) < (1e-2 if fp8 else 1e-5)
    assert fake_flashinfer.plans == 1
    be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))  # the next batch
    assert fake_flashinfer.plans == 2


def test_eager_plan_reads_the_host_metadata(fake_flashinfer):
    # the engine's step metadata carries its host copies: the plan reads them, not the device tensors
    # (a device->host copy would wait for every queued kernel while the GPU then idles during the plan)
    case = make_case([9, 1, 4], [40, 17, 4], d=64, block_size=32)
    be = make_backend(make_group("FLASHINFER", None, 64, "float32", 16, 32, "none"))
    meta = meta_of(case)
    host = (case.cu_seqlens_q.clone(), case.seqused_k.clone(), case.block_table.clone())
    meta.host = host
    meta.seqused_k = torch.zeros_like(meta.seqused_k)  # the device copy is never read for the plan
    out = be.forward(case.q, case.k_cache, case.v_cache, meta, layer_of(case))
    assert rel_err(out, case.reference(out_dtype=torch.float32)) < 1e-5
    assert fake_flashinfer.made[-1].p["cu"] is host[0]


def test_refusals_name_the_reason(fake_flashinfer):
    with pytest.raises(ValueError, match="TRT-LLM"):
        make_backend(make_group("FLASHINFER", None, 64, "fp8_e4m3", 16, 16, "q_k_v"))
    be = make_backend(make_group("FLASHINFER", None, 64, "fp8_e4m3", 16, 16, "k_v"))
    per_head = make_case([2], [20], dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn, descale="seq_head")
    with pytest.raises(ValueError, match="one K scale per layer"):
        be.forward(per_head.q, per_head.k_cache, per_head.v_cache, meta_of(per_head), layer_of(per_head))
    case = make_case([3], [9], mm_spans=[[(1, 5)]], sinks=True)
    be = make_backend(make_group("FLASHINFER", None, 64, "float32", 16, 16))
    with pytest.raises(NotImplementedError, match="mm-prefix"):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), LayerParams(case.softmax_scale))
    case.mm_prefix = None
    with pytest.raises(NotImplementedError, match="sinks"):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))


def test_missing_package_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    with pytest.raises(BackendUnavailableError, match=r"FLASHINFER needs flashinfer-python==0.7.2.post1") as e:
        make_backend(make_group("FLASHINFER", None, 256, "bfloat16", 16, 16))
    assert "\n" not in str(e.value)


def test_layer_scales_read_once_and_after_in_place_changes(fake_flashinfer, monkeypatch):
    case = make_case([5, 1], [21, 40], d=64, dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn, descale="layer")
    be = make_backend(make_group("FLASHINFER", None, 64, "fp8_e4m3", 16, 16, "k_v"))
    layer, meta = layer_of(case), meta_of(case)
    reads = []
    real = torch.Tensor.__float__
    monkeypatch.setattr(torch.Tensor, "__float__", lambda t: reads.append(1) or real(t))
    for _ in range(3):
        be.forward(case.q, case.k_cache, case.v_cache, meta, layer)
    assert len(reads) == 2  # K and V once, not per layer call (each read of a GPU scalar is a sync)
    layer.k_scale.mul_(2)  # recalibrated in place: read again
    case.k_descale = layer.k_scale
    out = be.forward(case.q, case.k_cache, case.v_cache, meta, layer)
    assert len(reads) == 3
    assert rel_err(out, case.reference(out_dtype=torch.float32)) < 1e-2


def _graph_case():
    case = make_case([1, 1, 1], [40, 17, 33], d=64, block_size=32, window_left=7, dtype=torch.bfloat16,
                     cache_dtype=torch.float8_e4m3fn, descale="layer")
    return case, make_backend(make_group("FLASHINFER", None, 64, "fp8_e4m3", 16, 32, "k_v")), meta_of(case)


def test_cuda_graph_metadata_is_replanned_before_each_replay(fake_flashinfer):
    case, be, meta = _graph_case()
    layer, table = layer_of(case), case.block_table.clone()
    assert be.supports_cuda_graphs()
    be.prepare_replay(meta, case.seqused_k.tolist(), table)
    assert fake_flashinfer.plans == 0  # the layer-side arguments come with the first call
    for _ in range(2):  # warm-up before capture: one plan, in CUDA-graph mode (fixed buffers)
        out = be.forward(case.q, case.k_cache, case.v_cache, meta, layer)
    assert fake_flashinfer.plans == 1 and fake_flashinfer.made[-1].graph
    assert rel_err(out, case.reference(out_dtype=torch.float32)) < 1e-2
    case.seqused_k.sub_(3)  # the next step, written into the static buffers by the runner ...
    be.prepare_replay(meta, case.seqused_k.tolist(), table)  # ... which then asks for a re-plan
    assert fake_flashinfer.plans == 2
    out = be.forward(case.q, case.k_cache, case.v_cache, meta, layer)  # what a replay runs: no plan
    assert fake_flashinfer.plans == 2
    assert rel_err(out, case.reference(out_dtype=torch.float32)) < 1e-2
    be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer)  # an eager batch: its own call
    assert fake_flashinfer.plans == 3 and not fake_flashinfer.made[-1].graph


def test_a_replan_that_changes_the_launch_refuses_the_replay(fake_flashinfer, monkeypatch):
    monkeypatch.setattr(_Wrapper, "launch", staticmethod(lambda pages: f"grid {pages}"))
    case, be, meta = _graph_case()
    be.prepare_replay(meta, case.seqused_k.tolist(), case.block_table)
    be.forward(case.q, case.k_cache, case.v_cache, meta, layer_of(case))
    be.prepare_replay(meta, case.seqused_k.tolist(), case.block_table)  # same pages: fine
    with pytest.raises(RuntimeError, match="launch shape"):
        be.prepare_replay(meta, [1, 1, 1], case.block_table)
