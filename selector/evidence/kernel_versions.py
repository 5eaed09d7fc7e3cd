"""Which version of a kernel library a release runs, and whether a perf figure was measured on it.

A perf entry (conf/perf/<gpu>.yaml) records the versions of the libraries its kernel ran from
(`versions`: torch, triton, the kernel package; `vllm` for vLLM's Triton kernel, which runs from that
release's source, kernels/vllm_triton.py). The rules model one vLLM release (`rules=vllm_X_Y_Z`); a figure
timed on another release's kernel says nothing certain about this one, so the objective warns where it
ranks one (objective_other_version). Kernels whose version a release fixes are listed here, per kernel
path: add the release-pinned FlashAttention/FlashInfer versions beside TRITON_ATTN to extend it.
"""

from __future__ import annotations

import re

_RULES = re.compile(r"^vllm_(\d+)_(\d+)_(\d+)$")


def release_of(ruleset: str) -> str | None:
    """The vLLM release a ruleset models (`vllm_0_33_0` -> `0.33.0`); None for one that models no release
    (e.g. `post_pr52987`, vLLM main after a PR)."""
    m = _RULES.match(ruleset)
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
