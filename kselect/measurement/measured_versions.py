"""The kernel library versions a conformance or perf run measured with (`kernel_versions:` at the top of
conf/conformance/<gpu>.yaml and conf/perf/<gpu>.yaml), and their merge into a file measured before.

The keys are the libraries the kernels run from, as the release manifests name them
(conf/rules/vllm_X_Y_Z.yaml `kernel_versions:`, read by selector/evidence/kernel_versions.py):

    vllm_flash_attn: vllm-0.34.0   # vLLM's FA3 library and FA4 fork, from that release's wheel
    flash_attn_4: 4.0.0b36         # flash-attn-4 (upstream FA4)
    flash_attn_3: ...              # flash-attention's hopper build, where it has package metadata
    flashinfer: 0.7.3              # flashinfer-python
    triton: 3.6.0                  # the Triton that compiled TRITON_ATTN (vLLM's or kselect's kernel)
    vllm_triton: vllm-0.34.0       # the release whose Triton attention source kernels/vllm_triton.py loaded

A run records a library only when one of its records ran it (a claim that was not `unavailable`, a timed
perf entry), with the version installed here: distribution metadata, no imports (no CUDA start-up). vLLM's
FA build has no distribution of its own where builds/install_vllm_fa.sh (this package's) put it beside the torch of a
GPU image: that script writes `KERNEL_VERSIONS` next to the `vllm/` it installs, read here; a full vLLM install
names its own version. What cannot be found is left out, never guessed, and never fails a run.

Merging keeps every library the file named before. Where the records measured with it before remain in
the file and this run measured it with another version, the value names both (`0.7.2.post1 and 0.7.3`),
so a release of either version still warns that some figures are from another version.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

UNRECORDED = "unrecorded"
JOIN = " and "
DISTRIBUTIONS = {"flash_attn_4": "flash-attn-4", "flash_attn_3": "flash_attn_3", "flashinfer": "flashinfer-python",
                 "triton": "triton"}  # library key -> the distribution whose metadata names its version
_VLLM_TRITON = re.compile(r"vllm (\d+\.\d+\.\d+) triton_unified_attention")


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except Exception:  # noqa: BLE001 - absent (PackageNotFoundError) or broken metadata: not recorded
        return None


def vllm_flash_attn() -> str | None:
    """`vllm-X.Y.Z`: the release whose `vllm.vllm_flash_attn` is importable here (located, not imported)."""
    try:
        spec = importlib.util.find_spec("vllm")
        locations = list(spec.submodule_search_locations or []) if spec else []
    except Exception:  # noqa: BLE001 - a broken vllm on the path: not recorded
        return None
    for loc in locations:
        pkg = Path(loc)
        if not (pkg / "vllm_flash_attn").is_dir():
            continue
        stamp = pkg.parent / "KERNEL_VERSIONS"  # builds/install_vllm_fa.sh: `vllm_flash_attn: vllm-X.Y.Z`
        if stamp.is_file():
            for line in stamp.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "vllm_flash_attn" and value.strip():
                    return value.strip()
        try:
            dist = md.distribution("vllm")
            if Path(dist.locate_file("vllm")).resolve() == pkg.resolve():
                return f"vllm-{dist.version}"
        except Exception:  # noqa: BLE001 - a copy without metadata: not recorded
            pass
    return None


def installed() -> dict[str, str]:
    """{library: version} of the kernel libraries installed here; absent ones are absent."""
    out = {lib: v for lib, dist in DISTRIBUTIONS.items() if (v := _dist_version(dist))}
    if fa := vllm_flash_attn():
        out["vllm_flash_attn"] = fa
    return out


def libraries(backend: str, build: str = "", versions: dict | None = None) -> dict[str, str | None]:
    """{library: version this record names itself, or None (the installed one)} of the libraries a record ran.

    backend: the claim's or perf entry's kernel path (`FLASHINFER`, `FLASH_ATTN_v4`, `TRITON_FLASH_ATTN_v3`,
    `TRITON_ATTN+kselect`); build: the library build that ran (the backend's kernel_build: `vllm.vllm_flash_attn`,
    `flash-attn-4`, `vllm 0.34.0 triton_unified_attention`, a composite's `A + B`); versions: the record's own."""
    out: dict[str, str | None] = {}
    if "vllm.vllm_flash_attn" in build:
        out["vllm_flash_attn"] = None
    if "flash-attn-4" in build:
        out["flash_attn_4"] = None
    if "flash_attn_3" in build:
        out["flash_attn_3"] = None
    if "FLASHINFER" in backend:
        out["flashinfer"] = None
    if "TRITON" in backend or "triton" in build:
        out["triton"] = None
    if m := _VLLM_TRITON.search(build):
        out["vllm_triton"] = f"vllm-{m.group(1)}"
    elif "triton_unified_attention" in build and (versions or {}).get("vllm"):
        out["vllm_triton"] = f"vllm-{versions['vllm']}"
    return out


def run_versions(records: Iterable[tuple[str, str, dict | None]], have: dict[str, str] | None = None) -> dict[str, str]:
    """{library: version} of the libraries `records` (backend, build, versions) ran; a library whose version
    is not known here is `unrecorded`."""
    have = installed() if have is None else have
    seen: dict[str, set[str]] = {}
    for backend, build, versions in records:
        for lib, own in libraries(backend, build, versions).items():
            seen.setdefault(lib, set()).add(own or have.get(lib) or UNRECORDED)
    return {lib: _join(vals) for lib, vals in sorted(seen.items())}


def used(records: Iterable[tuple[str, str, dict | None]]) -> set[str]:
    """The libraries records measured before (and kept in the file) ran."""
    return {lib for backend, build, versions in records for lib in libraries(backend, build, versions)}


def _split(value: str) -> set[str]:
    return {v.strip() for v in value.split(JOIN) if v.strip()}


def _join(values: set[str]) -> str:
    known = sorted(values - {UNRECORDED})
    return JOIN.join(known + ([UNRECORDED] if UNRECORDED in values else []))


def merge(old: dict[str, str] | None, new: dict[str, str], old_used: set[str]) -> dict[str, str]:
    """The file's kernel_versions after a run: `old` (what it said), `new` (this run's, run_versions), `old_used`
    (the libraries of the records kept from before). Every library `old` names stays; one this run measured
    takes its version, joined with the old one where records measured with that remain."""
    out = dict(old or {})
    for lib, v in new.items():
        vals = _split(v)
        if lib in old_used:
            vals |= _split(out[lib]) if lib in out else {UNRECORDED}
        joined = _join(vals)
        if joined == UNRECORDED:  # nothing known of it, before or now: left out, as an unrecorded library is
            out.pop(lib, None)
        else:
            out[lib] = joined
    return dict(sorted(out.items()))
