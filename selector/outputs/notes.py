"""Warnings about the evidence rather than the selection (claims never run on this GPU, measured data from
another kernel version) are notes: shown as one summary line by default, each in full under verbose=true.
The selection's own warnings (refuted claims, rule warnings, ignored settings) are always shown in full."""

from __future__ import annotations

from collections.abc import Iterable

NOTE_CODES = ("claims_unverified", "kernel_data_version")
VERBOSE_HINT = "verbose=true shows them"


def is_note(w) -> bool:
    return w.code in NOTE_CODES


def shown(warnings: Iterable, verbose: bool) -> list:
    """The warnings printed in full: every one under verbose, else the non-notes, each text once."""
    seen, out = set(), []
    for w in warnings:
        if (verbose or not is_note(w)) and w.text not in seen:
            seen.add(w.text)
            out.append(w)
    return out


def summary(warnings: Iterable) -> str:
    """One line for the notes among `warnings` ('' when there are none)."""
    unverified: dict[str, set[str]] = {}
    versions: dict[tuple, None] = {}
    for w in warnings:
        if w.code == "claims_unverified":
            unverified.setdefault(w.gpu, set()).add(w.group)
        elif w.code == "kernel_data_version":
            versions[(w.data, w.library, w.measured, w.release)] = None
    parts = [f"claims of the selected kernels unverified on {gpu} ({len(gs)} group{'s' if len(gs) != 1 else ''})"
             for gpu, gs in unverified.items()]
    parts += [f"{data} measured with {lib} {measured}, not the release's {release}"
              for data, lib, measured, release in versions]
    return f"note: {'; '.join(parts)} ({VERBOSE_HINT})" if parts else ""
