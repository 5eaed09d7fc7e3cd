"""FlashAttention 3/4 paged forward calls on SM90, one function per kernel family (FA3: two builds).

All take our layout (q [total_q, Hq, D], caches [blocks, page, Hkv, D], int32 block table,
cu_seqlens_q, seqused_k) and return [total_q, Hq, D] in `out_dtype`. window_left is already in
FlashAttention's convention (w - 1 for a w-token sliding window) and bounds the past side only, as in
kernels/reference.py: causal=False (the mm-prefix span pass, backends/span_split.py) opens the right
side up to max_seqlen_k, (window_left, max_seqlen_k); queries are bottom-right aligned to seqused_k
either way.

FA4 (flash-attn-4, CuTe DSL) first-call cost on the H200: `import flash_attn.cute` ~14 s per
process (MLIR load); each new kernel variant (head dim, page size, window on/off, sinks, dtype)
2-6 s of JIT; other batch sizes and lengths reuse it. The loaders turn the on-disk compile cache
on (FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1; set FLASH_ATTENTION_CUTE_DSL_CACHE_DIR to keep it
somewhere that survives), so a second process loads compiled kernels in ~0 s. Warm up (and
CUDA-graph capture) only after the first call of every variant you use.
"""

from __future__ import annotations

import torch

from .flash_attn_loader import load_fa3, load_fa4_fork, load_fa4_upstream


def _window(window_left: int, causal: bool, max_seqlen_k: int):
    if window_left < 0:
        return [-1, -1]
    return [window_left, 0 if causal else max_seqlen_k]


def _first(r):
    return r[0] if isinstance(r, (tuple, list)) else r


def fa3_forward(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
                softmax_scale, *, causal=True, window_left=-1, sinks=None, q_descale=None, k_descale=None,
                v_descale=None, out_dtype=torch.bfloat16, build=None):
    """FA3 through `build` (kernels.flash_attn_loader.load_fa3() when None). FP8 needs q, k and v all
    FP8 with [B, Hkv] descales. Sinks: vLLM's build only, as bf16 (its rule)."""
    build = build or load_fa3()
    if build.name == "upstream":
        return _fa3_upstream(build.module, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q,
                             max_seqlen_k, softmax_scale, causal=causal, window_left=window_left, sinks=sinks,
                             q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype,
                             disabled=build.disabled)
    out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=out_dtype, device=q.device)
    build.module.flash_attn_varlen_func(
        q, k_cache, v_cache, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k=seqused_k,
        block_table=block_table, softmax_scale=softmax_scale, causal=causal,
        window_size=_window(window_left, causal, max_seqlen_k), softcap=0.0, out=out, fa_version=3,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        s_aux=None if sinks is None else sinks.to(torch.bfloat16))
    return out


def _upstream_missing(disabled, dtype, head: int, local: bool) -> str:
    """What a call needs that the hopper build lacks ('' = nothing): head dim > 256 (FA3 has none), or a
    feature compiled out (flash_attn_config's FLASHATTENTION_DISABLE_* flags)."""
    if head > 256:
        return f"head dim {head} (FA3 supports at most 256)"
    hdim = next(h for h in (64, 96, 128, 192, 256) if head <= h)  # FA3 rounds head dims up to these
    need = [(f"HDIM{hdim}", f"head dim {hdim}"), ("PAGEDKV", "paged KV"), ("VARLEN", "varlen batches")]
    if local:
        need.append(("LOCAL", "sliding windows"))
    if dtype in (torch.float16, torch.float8_e4m3fn):
        need.append(("FP16" if dtype == torch.float16 else "FP8", f"{str(dtype).removeprefix('torch.')} inputs"))
    return ", ".join(what for flag, what in need if flag in disabled)


def _fa3_upstream(mod, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
                  softmax_scale, *,
                  causal, window_left, sinks, q_descale, k_descale, v_descale, out_dtype, disabled=frozenset()):
    """flash-attention's hopper build: paged varlen goes through flash_attn_with_kvcache (cache_seqlens =
    seqused_k, page_table = block table, no new K/V). It has no learnable-sink input."""
    if sinks is not None:
        raise NotImplementedError("FLASH_ATTN v3: the upstream flash_attn_3 build has no learnable sinks "
                                  "(vLLM's FA3 build has them: KSELECT_FA3_BUILD=vllm)")
    missing = _upstream_missing(disabled, q.dtype, q.shape[-1], window_left >= 0)
    if missing:
        raise NotImplementedError(f"FLASH_ATTN v3: this flash_attn_3 build lacks {missing} (its own check would "
                                  "abort the process; rebuild with it enabled, or KSELECT_FA3_BUILD=vllm)")
    r = mod.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=seqused_k, page_table=block_table, cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=max_seqlen_q, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        softmax_scale=softmax_scale, causal=causal, window_size=tuple(_window(window_left, causal, max_seqlen_k)),
        num_splits=1)
    return _first(r).to(out_dtype)


def fa4_forward(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
                softmax_scale, *, causal=True, window_left=-1, sinks=None, out_dtype=torch.bfloat16, num_splits=1):
    """Upstream FA4 (flash-attn-4 b36) on SM90: bf16/fp16, head dim <= 256, any page size.

    num_splits=1 (default): flash-attn-4 b36 has no split-KV on SM90 (a split > 1, which num_splits=0's
    heuristic picks for few long sequences, fails with "SplitKV not supported on SM 9.0").
    """
    mod = load_fa4_upstream()
    kw = dict(window_size=tuple(_window(window_left, causal, max_seqlen_k))) if window_left >= 0 else {}
    if sinks is not None:
        kw["learnable_sink"] = sinks.float()
    r = mod.flash_attn_varlen_func(
        q, k_cache, v_cache, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=block_table,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
        num_splits=num_splits, **kw)
    return _first(r).to(out_dtype)


def fa4_fork_forward(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
                     softmax_scale, *, causal=True, window_left=-1, sinks=None, k_descale=None, v_descale=None,
                     out_dtype=torch.bfloat16):
    """vLLM's FA4 fork: head dim 512, and FP8 K/V dequantized in the kernel (q in bf16, page == tile_n, 64)."""
    mod = load_fa4_fork()
    out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=out_dtype, device=q.device)
    mod.flash_attn_varlen_func(
        q, k_cache, v_cache, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k=seqused_k,
        block_table=block_table, softmax_scale=softmax_scale, causal=causal,
        window_size=_window(window_left, causal, max_seqlen_k), out=out, fa_version=4, num_splits=1,
        k_descale=k_descale, v_descale=v_descale,
        s_aux=None if sinks is None else sinks.float())
    return out
