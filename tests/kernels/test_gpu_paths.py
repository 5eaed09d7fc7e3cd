"""Every SM90 kernel path, through its backend adapter, against the fp32 reference (run on the H200).

Skips without CUDA, on a non-SM90 GPU (FlashAttention paths), or when a path's package is missing
(the reason names the package). Tolerances: kernels/tolerances.py.
"""

import dataclasses
import functools
import os
from unittest import mock

import pytest
import torch

from kselect.backends import BackendUnavailableError, make_backend
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.kernels.cache_ops import quantize_query
from kselect.kernels.cases import make_case
from kselect.kernels.tolerances import rel_err, tolerance
from kselect.selector.api import compose

pytestmark = pytest.mark.gpu


@functools.lru_cache(maxsize=None)
def per_head_scales(backend: str) -> bool:
    """capabilities.<backend>.per_head_quant_scales (declarations do not depend on the platform)."""
    cap = compose(["platform=cpu"]).capabilities.get(backend)
    return bool(cap and cap.per_head_quant_scales)
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
SM90 = torch.cuda.get_device_capability()[0] == 9
E4 = torch.float8_e4m3fn

# (q_lens, kv_lens), unequal lengths; decode lengths cross several pages and the 512-token window
MODES = {
    "prefill": ([300, 77, 1024], [300, 77, 1024]),
    "chunked": ([128, 64, 200], [1500, 700, 2600]),
    "decode": ([1, 1, 1, 1], [3000, 1200, 64, 4100]),
}
# name: (backend, fa_version, head, kv dtype, descale, page, window_left, hq, hkv, needs_sm90)
PATHS = {
    "fa3_bf16_d256_window": ("FLASH_ATTN", 3, 256, "bfloat16", "none", 16, 511, 8, 4, True),
    "fa3_fp8_qkv_d256_window": ("FLASH_ATTN", 3, 256, "fp8_e4m3", "q_k_v", 16, 511, 8, 4, True),
    "fa3up_bf16_d256_window": ("FLASH_ATTN", 3, 256, "bfloat16", "none", 16, 511, 8, 4, True),
    "fa3up_fp8_qkv_d256_window": ("FLASH_ATTN", 3, 256, "fp8_e4m3", "q_k_v", 16, 511, 8, 4, True),
    "fa4_bf16_d256_window": ("FLASH_ATTN", 4, 256, "bfloat16", "none", 64, 511, 8, 4, True),
    "fa4fork_bf16_d512": ("FLASH_ATTN", 4, 512, "bfloat16", "none", 64, -1, 8, 1, True),
    "fa4fork_fp8kv_d512_page64": ("FLASH_ATTN", 4, 512, "fp8_e4m3", "kv_dequant", 64, -1, 8, 1, True),
    "triton_bf16_d256_window": ("TRITON_ATTN", None, 256, "bfloat16", "none", 16, 511, 8, 4, False),
    "triton_bf16_d512": ("TRITON_ATTN", None, 512, "bfloat16", "none", 64, -1, 8, 1, False),
    "triton_fp8_d256_window": ("TRITON_ATTN", None, 256, "fp8_e4m3", "k_v", 16, 511, 8, 4, False),
    "triton_fp8_d512": ("TRITON_ATTN", None, 512, "fp8_e4m3", "k_v", 64, -1, 8, 1, False),
    "triton_fp8_qkv_d256": ("TRITON_ATTN", None, 256, "fp8_e4m3", "q_k_v", 16, -1, 8, 4, False),
    "flashinfer_bf16_d256_window": ("FLASHINFER", None, 256, "bfloat16", "none", 16, 511, 8, 4, False),
    "flashinfer_bf16_d512": ("FLASHINFER", None, 512, "bfloat16", "none", 32, -1, 8, 1, False),
    "flashinfer_fp8_d256_window": ("FLASHINFER", None, 256, "fp8_e4m3", "k_v", 16, 511, 8, 4, False),
    "flashinfer_fp8_d512": ("FLASHINFER", None, 512, "fp8_e4m3", "k_v", 32, -1, 8, 1, False),
    # vLLM 0.33.0's composite (backends/composite.py): Triton for batches with image spans, FA otherwise
    "tfa_fp8_qkv_d256_window": ("TRITON_FLASH_ATTN", 3, 256, "fp8_e4m3", "q_k_v", 64, 511, 8, 4, True),
    "tfa_fp8kv_d512_page64": ("TRITON_FLASH_ATTN", 4, 512, "fp8_e4m3", "kv_dequant", 64, -1, 8, 1, True),
    "tfa_bf16_d256_window": ("TRITON_FLASH_ATTN", 4, 256, "bfloat16", "none", 16, 511, 8, 4, True),
    # vLLM selects TRITON_FLASHINFER on SM10x only; its code (Triton with spans, FlashInfer otherwise)
    # runs on any GPU FlashInfer supports, 64-token kernel blocks as vLLM gives it
    "tfi_bf16_d256_window": ("TRITON_FLASHINFER", None, 256, "bfloat16", "none", 64, 511, 8, 4, False),
}
# Image spans per mode (absolute [start, end)): one longer than the 512-token window, one cut by the
# chunk start, one running past the cache end (clipped), a text-only sequence
SPANS = {
    "prefill": [[(40, 296)], [], [(100, 700), (800, 1000)]],
    "chunked": [[(1300, 1420)], [(650, 690)], [(2450, 2700)]],
}
# FA3 paths pin their build (KSELECT_FA3_BUILD): fa3_* = vLLM's, fa3up_* = flash-attention's hopper build
FA3_BUILD = {p: "upstream" if p.startswith("fa3up") else "vllm" for p in PATHS if p.startswith("fa3")}
MM_PATHS = ["fa3_bf16_d256_window", "fa3_fp8_qkv_d256_window", "fa3up_bf16_d256_window", "fa3up_fp8_qkv_d256_window",
            "fa4_bf16_d256_window", "fa4fork_bf16_d512",
            "fa4fork_fp8kv_d512_page64", "triton_bf16_d256_window", "triton_fp8_d512",
            "tfa_fp8_qkv_d256_window", "tfa_fp8kv_d512_page64", "tfa_bf16_d256_window", "tfi_bf16_d256_window"]
Q_SCALE = 0.05


def setup(path, mode, seed=0, spans=None):
    backend, ver, head, kv, descale, page, window, hq, hkv, needs_sm90 = PATHS[path]
    if needs_sm90 and not SM90:
        pytest.skip(f"{path} is an SM90 path; this GPU is {torch.cuda.get_device_name()}")
    try:
        with mock.patch.dict(os.environ, {"KSELECT_FA3_BUILD": FA3_BUILD.get(path, "auto")}):
            be = make_backend(make_group(backend, ver, head, kv, page, page, descale, hkv))
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    q_lens, kv_lens = MODES[mode]
    fp8 = kv.startswith("fp8")
    case = make_case(q_lens, kv_lens, hq=hq, hkv=hkv, d=head, block_size=page, dtype=torch.bfloat16,
                     cache_dtype=E4 if fp8 else None, descale="seq_head" if per_head_scales(backend) else "layer",
                     window_left=window, mm_spans=spans, device="cuda", seed=seed)
    qs = torch.tensor(Q_SCALE, device="cuda") if descale == "q_k_v" else None
    if qs is not None:  # quant-query: compare with the reference on the same quantized q
        ref = case.reference(q=quantize_query(case.q, qs), q_descale=qs, out_dtype=torch.float32)
    else:
        ref = case.reference(out_dtype=torch.float32)
    return be, case, layer_of(case, qs), ref, tolerance(torch.bfloat16, fp8)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("path", list(PATHS))
def test_path_against_reference(path, mode):
    be, case, layer, ref, tol = setup(path, mode)
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer)
    assert out.shape == case.q.shape and out.dtype == torch.bfloat16
    err = rel_err(out, ref)
    assert err == err and err <= tol, f"{path} {mode}: rel_err {err:.3e} > {tol}"


@pytest.mark.parametrize("mode", list(SPANS))
@pytest.mark.parametrize("path", MM_PATHS)
def test_mm_prefix_spans(path, mode):
    """Bidirectional image spans: FlashAttention's non-causal span pass (backends/span_split.py), Triton's mask."""
    be, case, layer, ref, tol = setup(path, mode, spans=SPANS[mode])
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer)
    err = rel_err(out, ref)
    assert err == err and err <= tol, f"{path} {mode} with spans: rel_err {err:.3e} > {tol}"


@pytest.mark.parametrize("path", [p for p in PATHS if PATHS[p][0] == "FLASHINFER"])
def test_replanned_graph_steps_without_host_syncs(path):
    """The engine re-plans FLASHINFER before every replay and does not wait for the GPU in between
    (the plan's host copies are pinned, kernels/flashinfer.py): five steps of growing contexts,
    each replay's output copied out in stream order, all checked after one sync at the end."""
    be, case, layer, ref, tol = setup(path, "decode", seed=2)
    meta, table = meta_of(case), case.block_table.cpu()
    start = case.seqused_k.clone()
    case.seqused_k.sub_(8)
    be.prepare_replay(meta, case.seqused_k.tolist(), table)
    fwd = lambda: be.forward(case.q, case.k_cache, case.v_cache, meta, layer)  # noqa: E731
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fwd()
    outs, lens = [], []
    for step in range(5):
        case.seqused_k.add_(1)  # on the device, as DecodeGraph.advance
        host = (start - 8 + step + 1).tolist()
        be.prepare_replay(meta, host, table)
        graph.replay()
        outs.append(out.clone())
        lens.append(host)
    torch.cuda.synchronize()
    for host, got in zip(lens, outs):
        at = dataclasses.replace(case, seqused_k=torch.tensor(host, dtype=torch.int32, device="cuda"))
        want = at.reference(out_dtype=torch.float32)
        err = rel_err(got, want)
        assert err == err and err <= tol, f"{path} step with lengths {host}: rel_err {err:.3e} > {tol}"


@pytest.mark.parametrize("path", list(PATHS))
def test_decode_under_cuda_graph(path):
    """Capture one decode step, then replay the next one: new q and shorter contexts written into the
    static buffers (and re-planned via prepare_replay, for FLASHINFER)."""
    be, case, layer, ref, tol = setup(path, "decode", seed=1)
    if not be.supports_cuda_graphs():
        pytest.skip(f"{be.name} does not claim CUDA-graph support")
    meta = meta_of(case)  # shares case's tensors: updating them updates the static metadata
    table = case.block_table.cpu()
    be.prepare_replay(meta, case.seqused_k.tolist(), table)
    fwd = lambda: be.forward(case.q, case.k_cache, case.v_cache, meta, layer)  # noqa: E731
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up compiles/JITs (and plans) outside the capture
        fwd()
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fwd()
    case.q.copy_(torch.randn_like(case.q))  # replay must read the new inputs ...
    case.seqused_k.sub_(torch.tensor([37, 5, 1, 20], dtype=torch.int32, device="cuda"))  # ... and lengths
    be.prepare_replay(meta, case.seqused_k.tolist(), table)
    ref = case.reference(q=quantize_query(case.q, layer.q_scale) if layer.q_scale is not None else None,
                         q_descale=layer.q_scale, out_dtype=torch.float32)
    graph.replay()
    torch.cuda.synchronize()
    err = rel_err(out, ref)
    assert err == err and err <= tol, f"{path} graph decode: rel_err {err:.3e} > {tol}"
