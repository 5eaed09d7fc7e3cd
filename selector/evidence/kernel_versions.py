"""Which version of a kernel library a release runs, and whether a perf figure was measured on it.

A perf entry (conf/perf/<gpu>.yaml) records the versions of the libraries its kernel ran from
(`versions`: torch, triton, the kernel package; `vllm` for vLLM's Triton kernel, which runs from that
release's source, kernels/vllm_triton.py). The rules model one vLLM release (`rules=vllm_X_Y_Z`); a figure
timed on another release's kernel says nothing certain about this one, so the objective warns where it
ranks one (objective_other_version). Kernels whose version a release fixes are listed here, per kernel
path: add the release-pinned FlashAttention/FlashInfer versions beside TRITON_ATTN to extend it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.vocab import MODEL_GROUP
from ..outputs.records import KernelDataVersion

import re

_RULES = re.compile(r"^vllm_(\d+)_(\d+)_(\d+)$")


def release_of(ruleset: str) -> str | None:
    """The vLLM release a ruleset models (`vllm_0_33_0` -> `0.33.0`); None for one that models no release
    (e.g. `post_pr52987`, vLLM main after a PR)."""
    m = _RULES.fullmatch(ruleset)
    return ".".join(m.groups()) if m else None


def expected(path: str, release: str) -> dict[str, str]:
    """{package: version} a figure of kernel path `path` must carry to be the release's own kernel."""
    if path == "TRITON_ATTN":  # vLLM's unified_attention, run from the release's source: versions["vllm"]
        return {"vllm": release}
    return {}


def other_versions(path: str, versions: dict[str, str], release: str | None) -> str:
    """'' when the figure ran the release's kernel (or nothing is known to differ), else what differs, e.g.
    `vllm 0.34.0 (release 0.33.0)`; a figure that names no version of a pinned package differs too."""
    if release is None:
        return ""
    diff = [f"{pkg} {versions.get(pkg, 'unrecorded')} (release {want})"
            for pkg, want in expected(path, release).items() if versions.get(pkg) != want]
    return ", ".join(diff)


# ---- release-level: the kernel libraries a release ships against those the data was measured with
#Measured data follows the kernel versions it was measured with.
# 
# A rules option declares the kernel libraries its vLLM release ships (`kernel_versions:` in
# conf/rules/<release>.yaml: the wheel's own FlashAttention build, `vllm_flash_attn: vllm-0.34.0`,
# and the FlashInfer it pins, `flashinfer: 0.7.3`). Conformance and perf files name the versions
# they were measured with (`kernel_versions:` at their top). Where a selected backend's library
# differs, or the data names none, the selection carries a `kernel_data_version` warning: the
# figures are from another version, never reused silently.

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


def selection_warnings(cfg, sel, evidence) -> list[KernelDataVersion]:
    """The warnings of a resolved selection: the conformance file it read, and (objective other than
    vllm) the perf file."""
    gpu = cfg.platform.gpu_model
    if not gpu or not cfg.kernel_versions:
        return []
    data = []
    conf = evidence.conformance(gpu)
    if conf is not None:
        data.append((f"conf/conformance/{gpu}.yaml", conf.kernel_versions))
    if cfg.objective.name != "vllm":
        pf = evidence.perf(gpu)
        if pf is not None:
            data.append((f"conf/perf/{gpu}.yaml", pf.kernel_versions))
    backends = {g.backend for g in sel.groups} | {g.prefill.backend for g in sel.groups if g.prefill is not None}
    return data_version_warnings(cfg.kernel_versions, cfg.ruleset.name, backends, data)
