"""The one narrow attention interface between the model (gemma4/) and the kernels.

A backend is built from a `selector.selection.GroupSelection` (backend name, FA version,
kernel block size, quant-query flag, descale handling) and runs paged attention for the
layers of that KV-cache group. The model never sees which kernel runs.

Cache layout (all backends): per layer, `k_cache` and `v_cache` of shape
[num_blocks, kv_block_size, num_kv_heads, head_size] (FlashAttention's paged NHD layout),
dtype = the model dtype, or torch.float8_e4m3fn / float8_e5m2 for an FP8 cache.
Block tables index kv blocks; a backend whose kernel block is smaller than the kv block
views each kv block as kv_block_size // kernel_block_size kernel blocks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from .common import query_scale
from .params import LayerParams  # noqa: F401 - re-exported: every backend takes it from here
from ..selector.outputs.selection import GroupSelection


@dataclass
class AttentionMetadata:
    """Per-batch, shared by every layer of a group (built once per forward step)."""

    cu_seqlens_q: torch.Tensor  # [B+1] int32: query tokens of sequence i are q[cu[i]:cu[i+1]]
    seqused_k: torch.Tensor  # [B] int32: tokens in the cache for sequence i, new ones included
    block_table: torch.Tensor  # [B, max_blocks] int32, in kv blocks of this group
    max_seqlen_q: int
    max_seqlen_k: int
    # Bidirectional multimodal spans (Gemma-4 vision mode): [B, S, 2] int32 of absolute
    # [start, end) token positions, padded with -1; None = purely causal.
    mm_prefix: torch.Tensor | None = None
    # Query positions: token j of sequence i sits at seqused_k[i] - q_len_i + j (bottom-right
    # aligned, as in FlashAttention varlen). Draft (MTP) steps pass `q_positions` explicitly
    # ([total_q] int64) because all draft queries share the last target position.
    q_positions: torch.Tensor | None = None
    # The same cu_seqlens_q, seqused_k and block_table on the host, where the step built them there: a
    # backend that plans on the host (FlashInfer) reads these instead of copying the device ones back,
    # a device->host copy that waits for every queued kernel (the GPU then idles while the host plans)
    host: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    # The block table in kernel blocks, per (kv block, kernel block): made by a step's first layer call that
    # needs it and read by the rest, so a group expands its table once a step, not once per layer (E4B FP8:
    # 7 small kernels x 42 layers). Stamped with block_table's address and whether a graph was capturing;
    # whoever runs a forward's layers calls begin_step() first (block tables change between steps).
    kernel_tables: dict = field(default_factory=dict, repr=False, compare=False)

    def begin_step(self) -> None:
        """Forget the kernel-block tables: called before a forward runs its layers, so a table made in one
        capture (or eager step) is never read by another."""
        self.kernel_tables.clear()


class ReplayShapeError(RuntimeError):
    """A captured launch cannot serve this step's values (FlashInfer's re-plan asks for another grid): the
    step runs eager; the graph stays valid for steps whose plan matches it."""


class BackendUnavailableError(RuntimeError):
    """The selected backend's kernel package is not installed: never fall back silently."""


class AttentionBackend(ABC):
    name: str = "?"
    kernel_build: str = ""  # which library build runs, where a backend has several (shown by the engine)
    # the kernel library's version, {package: version}, where it is not an installed distribution's (vLLM's
    # Triton kernel runs from a release's source: {"vllm": "0.33.0"}); perf and conformance records carry it
    kernel_versions: dict[str, str] = {}
    # forward() takes a kernels/attn_qkv.py RawQKV for q (its kernel makes q, k and v; gemma4/fused.py
    # QKV_IN_ATTENTION); other backends get q made
    takes_raw_qkv: bool = False

    def __init__(self, group: GroupSelection):
        self.group = group

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,  # [total_q, num_q_heads, head_size], model dtype
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        layer: LayerParams,
    ) -> torch.Tensor:  # [total_q, num_q_heads, head_size], model dtype
        ...

    def query_scale(self, meta: AttentionMetadata, layer: LayerParams, kv_dtype: torch.dtype) -> torch.Tensor | None:
        """The scale this call would quantize q with (quant-query on an FP8 cache), or None. A model that
        quantizes q itself with it (fused into its q/k/v kernel) may pass forward() that FP8 q, with
        layer.out_dtype set to the model dtype; the backend then skips its own quantize kernel."""
        return query_scale(self.group.descale, kv_dtype, layer, meta.seqused_k.device)

    def supports_cuda_graphs(self) -> bool:
        return False

    def prepare_replay(self, meta: AttentionMetadata, seqused_k: list[int], block_table: torch.Tensor) -> None:
        """A CUDA-graph runner calls this before capturing and before every replay, after writing the
        step's values into `meta`'s static buffers; `seqused_k` and `block_table` (CPU, kv blocks) are
        those values on the host. For kernels whose captured launch depends on host-side planning
        (FLASHINFER re-plans here); the default needs nothing."""
