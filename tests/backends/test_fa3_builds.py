"""FLASH_ATTN v3's two builds: which one KSELECT_FA3_BUILD picks, the errors when it is missing, and
the upstream (flash-attention hopper/) call mapping, run on CPU against a stand-in
`flash_attn_interface` that follows that module's documented semantics on the fp32 reference.
The real builds run on the H200: tests/kernels/test_gpu_paths.py."""

import sys
import types

import pytest
import torch

from kselect.backends import BackendUnavailableError, make_backend
from kselect.backends.fixtures import layer_of, make_group, meta_of
from kselect.kernels.cache_ops import quantize_query
from kselect.kernels.cases import make_case
from kselect.kernels.reference import paged_attention
from kselect.kernels.tolerances import rel_err


@pytest.fixture
def upstream_fa3(monkeypatch, hide_modules):
    """A stand-in for flash-attention's `flash_attn_interface` (hopper build). Records each call's kwargs."""
    calls = []

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None, page_table=None,
                                cu_seqlens_q=None, max_seqlen_q=None, q_descale=None, k_descale=None,
                                v_descale=None, softmax_scale=None, causal=False, window_size=(-1, -1),
                                num_splits=0, **rest):
        assert k is None and v is None and not rest, "no appended K/V, no other options"
        assert page_table.dtype == torch.int32 and cache_seqlens.dtype == torch.int32
        left, right = window_size
        # FlashAttention's window: keys in [i - left, i + right]; kselect only ever asks for (w, 0) causal or,
        # non-causal (the span pass), a right side reaching past every key: the past-only window the reference is
        assert (right == 0 if causal else right >= int(cache_seqlens.max())) or (left, right) == (-1, -1)
        calls.append(dict(causal=causal, window_size=tuple(window_size), num_splits=num_splits,
                          fp8=q.dtype == torch.float8_e4m3fn))
        out = paged_attention(q, k_cache, v_cache, cu_seqlens_q, cache_seqlens, page_table, softmax_scale,
                              causal=causal, window_left=left, q_descale=q_descale, k_descale=k_descale,
                              v_descale=v_descale, out_dtype=torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype)
        return out, torch.zeros(q.shape[0], q.shape[1])  # (out, softmax_lse) like return_softmax_lse=True

    mod = types.ModuleType("flash_attn_interface")
    mod.flash_attn_with_kvcache = flash_attn_with_kvcache
    hide_modules("vllm")
    monkeypatch.setitem(sys.modules, "flash_attn_interface", mod)
    monkeypatch.delenv("KSELECT_FA3_BUILD", raising=False)
    return calls


def test_auto_takes_upstream_when_vllm_is_missing_and_says_so(upstream_fa3):
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    assert be.build.name == "upstream" and "flash_attn_3" in be.kernel_build


@pytest.mark.parametrize("window", [-1, 6])
@pytest.mark.parametrize("q_lens,kv_lens", [([5, 9, 3], [21, 40, 9]), ([1, 1, 1], [33, 70, 5])])
def test_upstream_mapping_matches_reference(upstream_fa3, window, q_lens, kv_lens):
    case = make_case(q_lens, kv_lens, d=64, block_size=16, window_left=window, seed=3)
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    assert rel_err(out, case.reference()) < 1e-5
    assert upstream_fa3 == [dict(causal=True, window_size=(window, 0) if window >= 0 else (-1, -1), num_splits=1,
                                 fp8=False)]


def test_upstream_kernel_block_smaller_than_kv_block(upstream_fa3):
    case = make_case([7, 1], [40, 70], d=64, block_size=32, seed=5)
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 32))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    assert rel_err(out, case.reference()) < 1e-5


def test_upstream_fp8_quant_query_and_span_pass(upstream_fa3):
    """All-FP8 q/k/v with [B, Hkv] descales, and an image span: a causal call, then a (w, max_seqlen_k) non-causal one."""
    case = make_case([9, 6], [9, 14], d=64, dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn,
                     descale="seq_head", window_left=4, mm_spans=[[], [(9, 13)]])
    qs = torch.tensor(0.05)
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "fp8_e4m3", 16, 16, "q_k_v"))
    out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case, qs))
    ref = case.reference(q=quantize_query(case.q, qs), q_descale=qs, out_dtype=torch.float32)
    assert out.dtype == torch.bfloat16 and rel_err(out, ref) < 1e-2
    assert [(c["causal"], c["window_size"], c["fp8"]) for c in upstream_fa3] == [(True, (4, 0), True),
                                                                                  (False, (4, 13), True)]


def test_upstream_refuses_sinks_naming_the_other_build(upstream_fa3):
    case = make_case([3], [9], d=64, sinks=True)
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    with pytest.raises(NotImplementedError, match="no learnable sinks.*KSELECT_FA3_BUILD=vllm"):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))


def test_pinned_vllm_build_never_falls_back(upstream_fa3, monkeypatch):
    monkeypatch.setenv("KSELECT_FA3_BUILD", "vllm")
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    assert "vllm.vllm_flash_attn" in str(e.value) and "flash_attn_interface" not in str(e.value)


def test_a_selection_naming_a_build_runs_it_over_the_environment(upstream_fa3, monkeypatch, hide_modules):
    """A group with build='upstream' (an objective's choice) runs flash-attention's build even where
    KSELECT_FA3_BUILD says vLLM's; with that build missing it is unavailable, never vLLM's instead."""
    monkeypatch.setenv("KSELECT_FA3_BUILD", "vllm")
    be = make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16, build="upstream"))
    assert be.build.name == "upstream"
    hide_modules("flash_attn_interface", "flash_attn_3")
    monkeypatch.setenv("KSELECT_FA3_BUILD", "auto")  # auto would take vLLM's build: a named build does not
    with pytest.raises(BackendUnavailableError, match="build_fa3_hopper.sh"):
        make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16, build="upstream"))


def test_pinned_upstream_build_missing(monkeypatch, hide_modules):
    hide_modules("flash_attn_interface", "flash_attn_3")
    monkeypatch.setenv("KSELECT_FA3_BUILD", "upstream")
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    msg = str(e.value)
    assert "flash_attn_interface" in msg and "build_fa3_hopper.sh" in msg and "\n" not in msg


def test_no_build_at_all_names_both(monkeypatch, hide_modules):
    hide_modules("vllm", "flash_attn_interface", "flash_attn_3")
    monkeypatch.delenv("KSELECT_FA3_BUILD", raising=False)
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))
    msg = str(e.value)
    assert "vllm.vllm_flash_attn" in msg and "flash_attn_interface" in msg and "\n" not in msg


def test_bad_build_name_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("KSELECT_FA3_BUILD", "fa3-fwd")
    with pytest.raises(BackendUnavailableError, match=r"KSELECT_FA3_BUILD='fa3-fwd': allowed values are auto, vllm, "
                                                      r"upstream"):
        make_backend(make_group("FLASH_ATTN", 3, 64, "float32", 16, 16))


@pytest.mark.parametrize("head,dtype,window,missing", [
    (64, torch.float16, -1, "float16 inputs"),  # FP16 compiled out
    (128, torch.float32, -1, "head dim 128"),  # only HDIM64 and HDIM256 compiled in
    (64, torch.float32, 5, "sliding windows"),
])
def test_upstream_refuses_what_its_build_compiled_out(upstream_fa3, monkeypatch, head, dtype, window, missing):
    """The hopper build's own checks abort the process, so the adapter reads flash_attn_config and refuses first."""
    cfg = types.ModuleType("flash_attn_config")
    cfg.CONFIG = {"build_flags": {"FLASHATTENTION_DISABLE_FP16": True, "FLASHATTENTION_DISABLE_HDIM128": True,
                                  "FLASHATTENTION_DISABLE_LOCAL": True, "FLASHATTENTION_DISABLE_FP8": False}}
    monkeypatch.setitem(sys.modules, "flash_attn_config", cfg)
    case = make_case([3, 1], [9, 20], d=head, dtype=dtype, window_left=window)
    be = make_backend(make_group("FLASH_ATTN", 3, head, "float32", 16, 16))
    assert be.build.disabled == {"FP16", "HDIM128", "LOCAL"}
    with pytest.raises(NotImplementedError, match=f"lacks {missing} .*KSELECT_FA3_BUILD=vllm"):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
    assert upstream_fa3 == []  # the kernel was never called


def test_upstream_head_dim_over_256(upstream_fa3):
    case = make_case([2], [9], d=512, hkv=1, hq=2)
    be = make_backend(make_group("FLASH_ATTN", 3, 512, "float32", 16, 16, num_kv_heads=1))
    with pytest.raises(NotImplementedError, match="head dim 512 \\(FA3 supports at most 256\\)"):
        be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case))
