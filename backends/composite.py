"""TRITON_FLASH_ATTN and TRITON_FLASHINFER: vLLM 0.33.0's composite backends, from kernels
kselect already has. A batch in which some query row can see an image span unmasked (a
prefill chunk that reaches into a span) runs on the general child, our Triton kernel, which
takes the mm-prefix mask natively; every other batch (text prefill, decode, and prefill after
the spans) runs on the causal child: FLASH_ATTN v3/v4 resp. FLASHINFER. Both children read
the one paged cache of the group, with the group's kernel block.

Routing reads the batch's lengths and spans on the host, like vLLM's composite builder; a
decode batch (one query row per sequence) routes to the causal child without reading them, so
captured decode steps stay on the causal child.
"""

from __future__ import annotations

from .base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams

CHILDREN = {"TRITON_FLASH_ATTN": ("TRITON_ATTN", "FLASH_ATTN"), "TRITON_FLASHINFER": ("TRITON_ATTN", "FLASHINFER")}


def needs_mm_prefix(meta: AttentionMetadata) -> bool:
    """Some query row of this batch sits in an image span that also covers a later key:
    query rows [end - q_len, end), a span [start, stop) with start < end - 1 and stop > begin."""
    if meta.mm_prefix is None or meta.max_seqlen_q <= 1:
        return False
    cu = meta.cu_seqlens_q.tolist()
    ends = meta.seqused_k.tolist()
    for i, spans in enumerate(meta.mm_prefix.tolist()):
        q_len = cu[i + 1] - cu[i]
        if q_len <= 1:
            continue
        end = ends[i]
        begin = end - q_len
        if any(0 <= s < e and s < end - 1 and e > begin for s, e in spans):
            return True
    return False


class CompositeBackend(AttentionBackend):
    def __init__(self, group):
        super().__init__(group)
        from .registry import make_backend  # noqa: PLC0415 - the registry imports this module

        self.name = group.backend
        general, causal = CHILDREN[group.backend]
        fp8 = group.kv_cache_dtype.startswith("fp8")
        # the Triton child quantizes q exactly when the composite does (vLLM: both children or neither)
        triton_descale = ("q_k_v" if group.quant_query else "k_v") if fp8 else "none"
        parts = []
        for child, update in ((general, {"flash_attn_version": None, "descale": triton_descale}), (causal, {})):
            try:
                parts.append(make_backend(group.model_copy(update={"backend": child, **update})))
            except BackendUnavailableError as e:
                raise BackendUnavailableError(f"{group.backend} needs {child}: {e}") from e
        self.general, self.causal = parts
        self.kernel_build = " + ".join(p.kernel_build or p.name for p in parts)
        self.kernel_versions = {**self.general.kernel_versions, **self.causal.kernel_versions}  # e.g. vLLM's Triton release

    def child_for(self, meta: AttentionMetadata) -> AttentionBackend:
        return self.general if needs_mm_prefix(meta) else self.causal

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        return self.child_for(meta).forward(q, k_cache, v_cache, meta, layer)

    def supports_cuda_graphs(self) -> bool:
        return self.causal.supports_cuda_graphs()  # captured steps are decode steps: the causal child

    def prepare_replay(self, meta, seqused_k, block_table) -> None:
        self.causal.prepare_replay(meta, seqused_k, block_table)
