"""One paged cache, two kernels: the prefill backend of a group over its decode cache layout
(selector/measure/objective.py).

A prefill backend is a candidate when its resolution at the decode combination's cache block gives
the same KV block and dtype; otherwise it is refused with the reason. The objective scores every
combination at every cache block the perf runner times (selector/measure/reachable.py), so a faster prefill
kernel that needs another block is found as another layout of the same decode kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..evidence import perf_data as perf
from ..evidence.evidence import Evidence
from ..measure.builds import BUILD_RANK, group_builds
from ..base.errors import SelectionError
from ..measure.figures import figure, kv_tag, noise_why, point, step_figure, verified
from ..evidence.kernel_versions import release_of
from ..outputs.measured import Figure, PhaseEvidence
from ..measure.pins import choices, pinned, rank
from ..outputs.records import ObjectiveWarning
from ..rules.resolve import resolve_rules
from ..config.schema import KSelectConfig
from ..outputs.selection import GroupSelection, Selection


@dataclass
class Scored:
    """One valid, verified, measured combination of per-group decode kernels over one cache layout."""

    decode: float  # decode step, all layers (layers x ms; within `tie` of a group's fastest counts as the fastest)
    prefill: float  # prefill step over this layout, all layers (inf: a group's prefill is not measured)
    rank: tuple  # vLLM's priority order of the combination
    sel: Selection
    own_block: bool = True  # at the cache block the rules give these kernels (else one the objective sets)

    def request(self, new_tokens: int) -> float:
        """A request's attention time: one prefill, then new_tokens decode steps."""
        return self.prefill + new_tokens * self.decode


@dataclass
class Search:
    """What the search saw for one config: per kind, per backend name, why it was left out."""

    cfg: KSelectConfig
    data: perf.PerfFile | None
    evidence: Evidence  # what resolutions read (the claims each group relies on)
    priority: list[str]
    kinds: list[str]
    free: list[str]  # kinds the objective may choose (not pinned by the user)
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> backend -> why (a reason)
    unmeasured: dict[str, dict[str, ObjectiveWarning]] = field(default_factory=dict)  # kind -> backend -> warning
    scored: list[Scored] = field(default_factory=list)  # best request first
    timings: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (kind, phase) -> fence -> a bucket
    # (kind, phase) -> backend -> which library version differs from the release's, and a bucket timed so
    versions: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def out(self, kind: str, name: str, why: str) -> None:
        self.left_out.setdefault(kind, {}).setdefault(name, why)

    def timed(self, kind: str, phase: str, f: Figure) -> None:
        self.timings.setdefault((kind, phase), {}).setdefault(f.fence, f.bucket)
        if f.other_version:
            self.versions.setdefault((kind, phase), {}).setdefault(f.backend, f"{f.other_version} [{f.bucket}]")

    def other_version(self, kind: str) -> list[ObjectiveWarning]:
        """A warning per phase and backend whose ranked figure for this group was measured on a kernel library
        version other than the release's (selector/evidence/kernel_versions.py)."""
        return [ObjectiveWarning(code="objective_other_version", group=kind, objective=self.cfg.objective.name,
                                 phase=phase, backend=b, versions=text, release=release_of(self.cfg.ruleset.name))
                for (k, phase), seen in sorted(self.versions.items()) if k == kind for b, text in sorted(seen.items())]

    def mixed_timing(self, kind: str) -> list[ObjectiveWarning]:
        """A warning per phase whose compared figures for this group were timed differently: a fenced figure
        reads slower than a back-to-back one of the same kernel, so the comparison would favour the latter."""
        return [ObjectiveWarning(code="objective_mixed_timing", group=kind, objective=self.cfg.objective.name, phase=phase,
                                 timings="; ".join(f"{fence or 'back to back'}: {bucket}" for fence, bucket in sorted(seen.items())))
                for (k, phase), seen in sorted(self.timings.items()) if k == kind and len(seen) > 1]

    def no_data(self, g: GroupSelection, phase: str) -> None:
        shape = (f"{point(self.cfg, phase)} (d{g.head_size}, {kv_tag(g, self.cfg.model.dtype)}, "
                 f"{g.num_kv_heads} KV heads{f', window {g.sliding_window}' if g.sliding_window else ''}, "
                 f"page {g.kernel_block_size})")
        w = ObjectiveWarning(code="objective_no_measurement", group=g.kind, objective=self.cfg.objective.name,
                             backend=g.label, phase=phase, shape=shape)
        self.unmeasured.setdefault(g.kind, {}).setdefault(f"{phase}:{g.label}", w)


def prefill_over_layout(cfg, book, s: Search, chosen: Selection, g: GroupSelection, fg: GroupSelection):
    """The prefill backend of group g over g's cache layout (same KV block and dtype)."""
    obj = cfg.objective.name
    pins = {x.kind: x.backend for x in chosen.groups if not x.draft and x.kind in s.free}
    cands: list[tuple[float, float, GroupSelection, Figure]] = []
    tried: set[str] = set()
    for name, version in choices(cfg, s.priority):
        others = {x.flash_attn_version for x in chosen.groups if not x.draft and x.kind != g.kind and x.backend == "FLASH_ATTN"}
        glob = version if version else (3 if 3 in others and name != "FLASH_ATTN" else None)
        try:
            sel = resolve_rules(pinned(cfg, {**pins, g.kind: name}, chosen.block_size, fa_version=glob), book, s.evidence)
        except SelectionError:  # not valid at this cache block
            continue
        first = next(x for x in sel.groups if x.kind == g.kind and not x.draft)
        for p in (first, *group_builds(cfg, first, s.evidence)):  # and on other installed kernel builds (selector/measure/builds.py)
            if p.label in tried:
                continue
            tried.add(p.label)
            if (p.kv_block_size, p.kv_cache_dtype) != (g.kv_block_size, g.kv_cache_dtype):
                s.out("prefill:" + g.kind, p.label, f"refused for prefill: its layout (kv block {p.kv_block_size}, "
                      f"{p.kv_cache_dtype}) differs from the decode cache (kv block {g.kv_block_size}, {g.kv_cache_dtype})")
                continue
            if not verified(p):
                continue
            f = figure(s.data, p, cfg, "prefill")
            if f is None:
                s.no_data(p, "prefill")
                continue
            s.timed(g.kind, "prefill", f)
            same = 0 if p.label == g.label else 1
            cands.append((f.ms, same * 1000 + rank(s.priority, (name, version)) + BUILD_RANK * bool(p.build), p, f))
    if not cands or not cfg.objective.per_phase:
        f = figure(s.data, g, cfg, "prefill")
        why = "per_phase off: prefill on the decode backend" if cands else "no verified, measured prefill alternative: the decode backend"
        return None, PhaseEvidence(phase="prefill", objective=obj, point=point(cfg, "prefill"), backend=g.label,
                                   chosen=f, why=why, step=step_figure(s.data, cfg))
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= best * (1 + cfg.objective.tie)]
    ms, _, p, f = min(near, key=lambda c: c[1])  # ties: the decode backend (one kernel), then priority
    others = sorted((c[3] for c in cands if c[2].label != p.label), key=lambda x: x.ms)
    vf = figure(s.data, fg, cfg, "prefill") if fg.label != p.label else None
    fastest = min((c[3] for c in cands), key=lambda x: x.ms)
    why = "fastest verified over the decode cache layout" if ms == best else \
        noise_why(cfg, f, fastest, "the decode backend / priority order decides")
    ev = PhaseEvidence(phase="prefill", objective=obj, point=point(cfg, "prefill"), backend=p.label, chosen=f,
                       runner_up=others[0] if others else None, vllm=vf, others=tuple(others), why=why,
                       step=step_figure(s.data, cfg))
    clean = p.model_copy(update={"measured": (), "prefill": None})
    return clean, ev


def prefill_total(cfg, book, s: Search, sel: Selection) -> dict | None:
    """Per free group (ms, layers, backend) of the fastest prefill over sel's cache layout (None: a group
    has no measured prefill); side-effect free."""
    scratch = Search(s.cfg, s.data, s.evidence, s.priority, s.kinds, s.free)
    figs: dict = {}
    for g in (x for x in sel.groups if not x.draft and x.kind in s.free):
        _, ev = prefill_over_layout(cfg, book, scratch, sel, g, g)
        if ev.chosen is None:
            return None
        figs[g.kind] = (ev.chosen.ms, len(g.layers), ev.backend)
    return figs

