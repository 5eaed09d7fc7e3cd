"""Measured data follows the kernel versions it was measured with.

A rules option declares the kernel libraries its vLLM release ships (`kernel_versions:` in
conf/rules/<release>.yaml: the wheel's own FlashAttention build, `vllm_flash_attn: vllm-0.34.0`,
and the FlashInfer it pins, `flashinfer: 0.7.3`). Conformance and perf files name the versions
they were measured with (`kernel_versions:` at their top). Where a selected backend's library
differs, or the data names none, the selection carries a `kernel_data_version` warning: the
figures are from another version, never reused silently.
"""

from __future__ import annotations

from collections.abc import Iterable

from .records import KernelDataVersion
from .vocab import MODEL_GROUP

# the kernel library behind each backend kselect models (composites: both children's)
LIBRARIES = {
    "FLASH_ATTN": ("vllm_flash_attn",),
    "TRITON_FLASH_ATTN": ("vllm_flash_attn",),
    "FLASHINFER": ("flashinfer",),
    "TRITON_FLASHINFER": ("flashinfer",),
}
UNRECORDED = "an unrecorded version"


def data_version_warnings(release: dict[str, str], rules: str, backends: Iterable[str],
                          data: Iterable[tuple[str, dict[str, str] | None]]) -> list[KernelDataVersion]:
    """`data`: (file label, its kernel_versions) of each data file the selection reads."""
    if not release:
        return []
    libs = sorted({lib for b in backends for lib in LIBRARIES.get(b, ())})
    out = []
    for label, measured in data:
        for lib in libs:
            want = release.get(lib)
            got = (measured or {}).get(lib)
            if want is not None and got != want:
                out.append(KernelDataVersion(group=MODEL_GROUP, data=label, library=lib, measured=got or UNRECORDED,
                                             release=want, rules=rules))
    return out


def selection_warnings(cfg, sel) -> list[KernelDataVersion]:
    """The warnings of a resolved selection: its conformance file, and (objective other than vllm)
    its perf file."""
    gpu = cfg.platform.gpu_model
    if not gpu or not cfg.kernel_versions:
        return []
    from . import conformance, perf  # noqa: PLC0415 - perf and conformance read files

    data = []
    conf = conformance.load(gpu)
    if conf is not None:
        data.append((f"conf/conformance/{gpu}.yaml", conf.kernel_versions))
    if cfg.objective.name != "vllm":
        pf = perf.load(gpu)
        if pf is not None:
            data.append((f"conf/perf/{gpu}.yaml", pf.kernel_versions))
    backends = {g.backend for g in sel.groups} | {g.prefill.backend for g in sel.groups if g.prefill is not None}
    return data_version_warnings(cfg.kernel_versions, cfg.ruleset.name, backends, data)
