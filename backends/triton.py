"""TRITON_ATTN: vLLM's unified Triton attention, and kselect's own Triton kernel as its build `+kselect`.

- TRITON_ATTN (no build) runs vLLM's kernel, `unified_attention` from the release's own source
  (kernels/vllm_triton.py), with the metadata vLLM's TritonAttentionMetadataBuilder and
  TritonAttentionImpl.forward give it (vllm/v1/attention/backends/triton_attn.py): query_start_loc,
  seq_lens, block_table and max lengths as they are; window_size (window_left, 0); softcap 0 (Gemma-4's
  attention has none); per-tensor FP8 descales as vLLM passes them (q_descale only for an FP8 query,
  k/v descales expanded to [B, Hkv]); sinks; the split-K threshold MIN_LAUNCH_GRID_SIZE_2D // Hkv and its
  NUM_PAR_SOFTMAX_SEGMENTS-segment fp32 scratch with one row per sequence up to that threshold; image
  spans as vLLM's mm_prefix_range (inclusive ends, (0, 0) padding), clamped by the window on sliding
  layers as Gemma-4 sets mm_prefix_clamp_sliding_window.
- TRITON_ATTN+kselect (group.build == "kselect") runs kernels/triton_paged.py. vLLM never runs it: only
  an objective picks it (selector/measure/builds.py), and an export says so.

Runs on CUDA, or on CPU tensors under TRITON_INTERPRET=1 (slow; what CI uses).
"""

from __future__ import annotations

import importlib.metadata as md
import os

import torch

from .base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams
from ..kernels.reference import is_fp8
from .common import expand_descale, kernel_block_view, quant_inputs

KSELECT_BUILD = "kselect"


def _need_device() -> None:
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailableError("TRITON_ATTN needs a CUDA GPU (or TRITON_INTERPRET=1, the slow CPU "
                                      "interpreter, set before triton is imported)")


class TritonAttnBackend(AttentionBackend):
    """Picks the implementation by the group's build: vLLM's kernel, or kselect's (`+kselect`)."""

    name = "TRITON_ATTN"

    def __new__(cls, group):
        if cls is TritonAttnBackend:
            cls = KselectTritonBackend if group.build == KSELECT_BUILD else VllmTritonBackend
        return super().__new__(cls)


class KselectTritonBackend(TritonAttnBackend):
    label = "TRITON_ATTN+kselect"
    kernel_build = "kselect kernels/triton_paged.py"
    takes_raw_qkv = True

    def __init__(self, group):
        super().__init__(group)
        try:
            from ..kernels import triton_paged
        except ImportError as e:
            raise BackendUnavailableError(f"TRITON_ATTN+kselect needs the triton package (pip install triton): {e}") from e
        _need_device()
        self.kernel = triton_paged
        self.kernel_versions = {"kselect": _kselect_version()}

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        if isinstance(q, self.kernel.RawQKV) and is_fp8(k_cache.dtype):
            q = q.ready()  # the kernel takes raw q/k/v with 16-bit caches only
        qi = quant_inputs(self.group.descale, q, k_cache, layer)
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        return self.kernel.paged_attention_triton(
            qi.q, kc, vc, meta.cu_seqlens_q, meta.seqused_k, bt, layer.softmax_scale,
            max_seqlen_q=meta.max_seqlen_q, max_seqlen_k=meta.max_seqlen_k, window_left=layer.window_left,
            mm_prefix=meta.mm_prefix, sinks=layer.sinks, q_descale=expand_descale(qi.q_descale, b, hkv),
            k_descale=expand_descale(qi.k_descale, b, hkv), v_descale=expand_descale(qi.v_descale, b, hkv),
            q_positions=meta.q_positions, out_dtype=qi.out_dtype)

    def supports_cuda_graphs(self) -> bool:
        return True  # launch grid depends only on shapes and max_seqlen_*; no host syncs


class VllmTritonBackend(TritonAttnBackend):
    label = "TRITON_ATTN"

    def __init__(self, group):
        super().__init__(group)
        from ..kernels import vllm_triton

        try:
            self.kernel = vllm_triton.load()
        except (ImportError, ValueError) as e:  # ValueError: a bad KSELECT_VLLM_RELEASE, reported the same way
            raise BackendUnavailableError(str(e).splitlines()[0]) from e
        _need_device()
        self.kernel_build = self.kernel.label
        self.kernel_versions = {"vllm": self.kernel.release}
        self.threshold_3d = max(1, self.kernel.min_launch_grid_2d // group.num_kv_heads)
        fp8 = group.kv_cache_dtype.startswith("fp8")
        self.quant_mode = self.kernel.kv_quant_mode.FP8_PER_TENSOR if fp8 else self.kernel.kv_quant_mode.NONE
        self._scratch: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def scratch(self, device, hq: int, head: int):
        """The split-K buffers of vLLM's builder: [rows, Hq, segments(, padded head)] fp32, rows = the 3D
        threshold (vLLM: min(threshold, max_num_seqs) x the longest 3D query, 1 without speculative decoding).
        Made once per device and shape, outside any capture, so captured graphs keep reading them."""
        key = (torch.device(device), hq, head)
        hit = self._scratch.get(key)
        if hit is None:
            rows, seg = self.threshold_3d, self.kernel.num_par_softmax_segments
            pad = 1 << (head - 1).bit_length()
            f32 = dict(dtype=torch.float32, device=device)
            hit = self._scratch[key] = (torch.empty(rows, hq, seg, pad, **f32), torch.empty(rows, hq, seg, **f32),
                                        torch.empty(rows, hq, seg, **f32))
        return hit

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        if meta.q_positions is not None:
            raise NotImplementedError("TRITON_ATTN (vLLM's unified_attention): explicit q_positions (MTP drafts) "
                                      "are not supported")
        kc, vc, bt = kernel_block_view(k_cache, v_cache, meta, self.group.kernel_block_size)
        qi = quant_inputs(self.group.descale, q, k_cache, layer)
        if qi.q.dtype == torch.bfloat16 and qi.q.device.type != "cuda":
            raise NotImplementedError("TRITON_ATTN (vLLM's unified_attention) cannot run bf16 in the CPU interpreter: "
                                      "its tl.dot multiplies bf16 operands as integer bit patterns; use float16 or "
                                      "float32 on CPU, or TRITON_ATTN+kselect (which widens them)")
        b, hkv = meta.seqused_k.numel(), k_cache.shape[2]
        # vLLM: q_descale only for an FP8 query, k/v descales always expanded to [B, Hkv] (a view)
        kd, vd = (_per_seq_head(d, b, hkv) for d in (qi.k_descale, qi.v_descale))
        out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[3], dtype=qi.out_dtype, device=q.device)
        segm_out, segm_max, segm_sum = self.scratch(q.device, q.shape[1], q.shape[2])
        self.kernel.unified_attention(
            q=qi.q, k=kc, v=vc, out=out, cu_seqlens_q=meta.cu_seqlens_q, max_seqlen_q=meta.max_seqlen_q,
            seqused_k=meta.seqused_k, max_seqlen_k=meta.max_seqlen_k, softmax_scale=layer.softmax_scale,
            causal=True, window_size=(layer.window_left, 0) if layer.window_left >= 0 else (-1, -1),
            block_table=bt, softcap=0, q_descale=qi.q_descale, k_descale=kd, v_descale=vd,
            seq_threshold_3D=self.threshold_3d, num_par_softmax_segments=self.kernel.num_par_softmax_segments,
            softmax_segm_output=segm_out, softmax_segm_max=segm_max, softmax_segm_expsum=segm_sum,
            sinks=layer.sinks, mm_prefix_range=mm_prefix_range(meta.mm_prefix),
            kv_quant_mode=self.quant_mode, mm_prefix_clamp_sliding_window=layer.window_left >= 0)
        return out

    def supports_cuda_graphs(self) -> bool:
        return True  # vLLM captures it (AttentionCGSupport.ALWAYS); no host syncs, persistent scratch


def mm_prefix_range(mm_prefix: torch.Tensor | None) -> torch.Tensor | None:
    """kselect's spans ([B, S, 2] absolute [start, end), -1 padding) -> vLLM's mm_prefix_range
    ([B, S, 2] int32 [start, end] inclusive, (0, 0) for none: compute_mm_prefix_range_tensor)."""
    if mm_prefix is None:
        return None
    valid = (mm_prefix[..., 0] >= 0) & (mm_prefix[..., 1] > mm_prefix[..., 0])
    rng = torch.stack((mm_prefix[..., 0], mm_prefix[..., 1] - 1), -1)
    return torch.where(valid[..., None], rng, torch.zeros_like(rng)).to(torch.int32).contiguous()


def _per_seq_head(d: torch.Tensor | None, b: int, hkv: int) -> torch.Tensor | None:
    """A descale as vLLM passes it: the layer's scalar expanded to [B, Hkv] (the kernel reads element 0)."""
    if d is None:
        return None
    if d.numel() != 1:
        raise NotImplementedError("TRITON_ATTN (vLLM's unified_attention) takes one K and one V scale per layer "
                                  f"(vLLM: supports_per_head_quant_scales False), not {tuple(d.shape)}")
    return d.reshape(1, 1).expand(b, hkv)


def _kselect_version() -> str:
    try:
        return md.version("kselect")
    except md.PackageNotFoundError:
        return "unknown"
