"""vLLM's unified Triton attention (TRITON_ATTN), from the release's own source, against the reference.

Runs through kselect's backend, which gives the kernel the metadata vLLM's TritonAttentionMetadataBuilder
gives it (backends/triton.py); softcap, which Gemma-4 never sets, is checked on the kernel call itself.
On CPU it runs in the Triton interpreter (TRITON_INTERPRET=1, conftest.py): tiny shapes only. The source
comes from the cache `python -m kselect.kernels.vllm_triton_fetch` fills (.ci/run does); without it these
tests skip, unless KSELECT_REQUIRE_VLLM_TRITON=1 (CI), which makes a missing source a failure.
"""

import os

import pytest
import torch

pytest.importorskip("triton")
from kselect.backends import triton as triton_backend  # noqa: E402
from kselect.backends.fixtures import layer_of, make_group, meta_of  # noqa: E402
from kselect.backends.registry import make_backend  # noqa: E402
from kselect.kernels import vllm_triton  # noqa: E402
from kselect.kernels.cases import make_case  # noqa: E402
from kselect.kernels.tolerances import rel_err, tolerance  # noqa: E402
from naive_attention import MASKS, MODES, spans_for  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
try:
    KERNEL = vllm_triton.load()
except ImportError as e:
    if os.environ.get("KSELECT_REQUIRE_VLLM_TRITON") == "1":
        raise
    pytest.skip(f"vLLM's Triton kernel source is not here: {e}", allow_module_level=True)
E4 = torch.float8_e4m3fn
# half-precision dots: the CPU interpreter multiplies bf16 dot operands as integers (kernels/triton_paged.py widens
# them; vLLM's kernel cannot be changed), so on CPU the half-precision cases run float16, on CUDA bfloat16
DOT16 = torch.bfloat16 if DEV == "cuda" else torch.float16
# fp32 inputs: exact dots in the interpreter; on CUDA Triton's fp32 dot is TF32 (7.3e-4 seen on the H200)
FP32 = tolerance(torch.float32) if DEV == "cpu" else 2e-3


def build(mode, mask, **kw):
    q_lens, kv_lens = MODES[mode]
    opts = dict(d=32, device=DEV, **MASKS[mask])
    if opts.pop("mm_spans", False):
        # spans end within the sequence: vLLM's kernel lets a span's queries see keys past seq_len (slots not
        # yet written) where a span runs beyond the cached tokens; the reference never does
        opts["mm_spans"] = [[(s, min(e, kl)) for s, e in spans] for spans, kl in zip(spans_for(q_lens, kv_lens), kv_lens)]
    opts.update(kw)
    return make_case(q_lens, kv_lens, **opts)


def backend_for(case, kv="float32", descale="none", kernel_block=16, build=None):
    hkv = case.k_cache.shape[2]
    return make_backend(make_group("TRITON_ATTN", head=case.q.shape[2], kv=kv, kernel_block=kernel_block,
                                   kv_block=case.k_cache.shape[1], descale=descale, num_kv_heads=hkv, build=build))


def check(case, tol, q_scale=None, **kw):
    be = backend_for(case, **kw)
    assert type(be).__name__ == "VllmTritonBackend" and be.kernel_versions == {"vllm": KERNEL.release}
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case, q_scale))
    assert out.dtype == case.q.dtype and torch.isfinite(out).all()
    qd = q_scale.reshape(1, 1).expand(case.seqused_k.numel(), case.k_cache.shape[2]) if q_scale is not None else None
    ref = case.reference(q=_fp8_round_trip(case.q, q_scale) if q_scale is not None else None, q_descale=qd)
    err = rel_err(out, ref)
    assert err <= tol, err


def _fp8_round_trip(q, scale):
    return (q.float() / scale).to(E4)  # what the quant-query path feeds the kernel (kernels/cache_ops.quantize_query)


@pytest.mark.parametrize("mode,mask", [("prefill", "causal"), ("chunked", "window"), ("decode", "causal"),
                                       ("decode", "window"), ("mixed", "sinks"), ("chunked", "mm_prefix"),
                                       ("mixed", "all"), ("prefill", "long_span"),
                                       ("chunked", "long_span")])
def test_modes_and_masks(mode, mask):
    check(build(mode, mask, seed=11), FP32)


def test_split_k_and_2d_decode_agree():
    """A 4-sequence decode runs split-K (3D: 4 <= 128 // 2 KV heads); with no threshold vLLM launches 2D. Both
    must equal the reference (the backend's path is the one vLLM takes at this batch)."""
    case = build("decode", "window", seed=5)
    be = backend_for(case)
    assert be.threshold_3d == KERNEL.min_launch_grid_2d // 2 >= case.seqused_k.numel()
    ref = case.reference()
    out3d = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    out2d = torch.empty_like(case.q)
    KERNEL.unified_attention(q=case.q, k=case.k_cache, v=case.v_cache, out=out2d, cu_seqlens_q=case.cu_seqlens_q,
                             max_seqlen_q=1, seqused_k=case.seqused_k, max_seqlen_k=case.max_seqlen_k,
                             softmax_scale=case.softmax_scale, causal=True, window_size=(case.window_left, 0),
                             block_table=case.block_table, softcap=0, q_descale=None, k_descale=None, v_descale=None)
    assert rel_err(out3d, ref) <= FP32 and rel_err(out2d, ref) <= FP32


def test_gqa_group_of_eight():
    check(build("chunked", "causal", hq=8, hkv=1, seed=2), FP32)


def test_fp16_on_a_kernel_block_view():
    # 64-token kv blocks read as 16-token kernel blocks: the block table is re-indexed as vLLM's is
    check(build("mixed", "window", dtype=torch.float16, block_size=64, seed=4), tolerance(torch.float16),
          kernel_block=16)


def test_fp8_kv_cache():
    case = build("chunked", "window", dtype=DOT16, cache_dtype=E4, seed=6)
    check(case, tolerance(DOT16, fp8=True), kv="fp8_e4m3", descale="k_v")


@pytest.mark.skipif(DEV == "cuda", reason="the refusal is the CPU interpreter's")
def test_bf16_refused_in_the_interpreter():
    case = build("decode", "causal", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="bf16"):
        backend_for(case, kv="bfloat16").forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))


def test_fp8_quant_query():
    case = build("decode", "sinks", dtype=torch.bfloat16, cache_dtype=E4, seed=8)
    check(case, tolerance(torch.bfloat16, fp8=True), q_scale=torch.tensor(0.05, device=DEV), kv="fp8_e4m3",
          descale="q_k_v")


def test_per_head_scales_refused():
    # vLLM passes one K and one V scale per layer; its kernel would read element 0 of a [B, Hkv] scale
    case = build("decode", "causal", dtype=DOT16, cache_dtype=E4, descale="seq_head")
    with pytest.raises(NotImplementedError, match="one K and one V scale per layer"):
        backend_for(case, kv="fp8_e4m3", descale="k_v").forward(case.q, case.k_cache, case.v_cache, meta_of(case),
                                                                 layer_of(case))


def test_softcap():
    case = build("chunked", "causal", seed=9)
    case.q.mul_(4)  # logits well past the cap
    out = torch.empty_like(case.q)
    KERNEL.unified_attention(q=case.q, k=case.k_cache, v=case.v_cache, out=out, cu_seqlens_q=case.cu_seqlens_q,
                             max_seqlen_q=case.max_seqlen_q, seqused_k=case.seqused_k, max_seqlen_k=case.max_seqlen_k,
                             softmax_scale=case.softmax_scale, causal=True, window_size=(-1, -1),
                             block_table=case.block_table, softcap=2.0, q_descale=None, k_descale=None, v_descale=None)
    ref = case.reference()
    from kselect.kernels.reference import paged_attention

    capped = paged_attention(case.q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seqused_k, case.block_table,
                             case.softmax_scale, softcap=2.0, out_dtype=case.q.dtype)
    assert rel_err(out, capped) <= FP32 and rel_err(ref, capped) > 1e-2  # the cap changes the result


def test_mm_prefix_range_is_vllms_inclusive_form():
    spans = torch.tensor([[[3, 9], [-1, -1]], [[0, 2], [5, 5]]], dtype=torch.int32)
    assert triton_backend.mm_prefix_range(spans).tolist() == [[[3, 8], [0, 0]], [[0, 1], [0, 0]]]
    assert triton_backend.mm_prefix_range(None) is None


def test_kselect_build_runs_kselects_kernel():
    case = build("mixed", "all", seed=3)
    be = backend_for(case, build="kselect")
    assert type(be).__name__ == "KselectTritonBackend" and set(be.kernel_versions) == {"kselect"}
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    assert rel_err(out, case.reference()) <= FP32 / 10


def test_draft_positions_refused():
    case = build("decode", "causal")
    case.q_positions = torch.zeros(case.q.shape[0], dtype=torch.long, device=DEV)
    with pytest.raises(NotImplementedError, match="q_positions"):
        backend_for(case).forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))


def test_step_profile_files_vllms_kernels_under_attention():
    """The step profile's categories (kselect/measurement/step_profile.py) put every kernel vLLM's
    unified_attention launches -- the module's own public Triton functions, read from the release's
    source -- under attention, not elementwise or norm."""
    import sys

    from kselect.measurement.step_profile import category

    mod = sys.modules[KERNEL.unified_attention.__module__]
    launched = [n for n, f in vars(mod).items()
                if not n.startswith("_") and getattr(getattr(f, "fn", None), "__module__", None) == mod.__name__]
    assert "kernel_unified_attention" in launched and "reduce_segments" in launched
    assert {n: category(n) for n in launched} == {n: "attention" for n in launched}
