"""flashinfer.mla stand-in. vLLM feature-detects FlashInfer's SM90 NoPE MLA (FLASHINFER_MLA_SPARSE_SM90)
by the keyword-only `ckv_scale_arr` of BatchMLAPagedAttentionWrapper.run, which FlashInfer added in
0.6.18 (vllm/utils/flashinfer.py: has_flashinfer_sm90_nope_mla): the stub's run() has it from that
version on, as the release's pinned FlashInfer does. Every other name is a placeholder."""

from flashinfer import __version__, _placeholder, _Placeholder


def _at_least(version: str, floor: tuple[int, ...]) -> bool:
    parts = []
    for p in version.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit()) if not p.isdigit() else p
        parts.append(int(digits or 0))
    return tuple(parts) >= floor


if _at_least(__version__, (0, 6, 18)):
    class BatchMLAPagedAttentionWrapper(_Placeholder):
        def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, *,
                ckv_scale_arr=None, **kwargs):
            raise RuntimeError("flashinfer stub: no kernels on this machine (oracle selection only)")
else:
    class BatchMLAPagedAttentionWrapper(_Placeholder):
        def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, **kwargs):
            raise RuntimeError("flashinfer stub: no kernels on this machine (oracle selection only)")


__getattr__ = _placeholder
