"""What was measured for a resolved group: its label, claim dtype, verified status, and its conf/perf
figure at the objective's operating point (selector/measure/objective.py).

Where the model's prefill step, measured as the engine runs it (conf/perf `steps`, `kselect perf-steps`),
is host-bound, a prefill call costs at least its measured host time (`host_ms`); in a GPU-bound step (the
engine's prefill CUDA graphs), or where no step is measured, its kernels. A backend that plans on the host
before each prefill step (FlashInfer, `plan_ms`) adds that plan once per step, spread over the group's layers:
the GPU waits for it (bench/results/h200/splits/: E4B's FlashInfer prefill of 512 tokens took 1.9 ms more than
FA3's, its kernels 0.24 ms more by conf/perf).
"""

from __future__ import annotations

from ..evidence import perf_data as perf
from ..evidence.kernel_versions import other_versions, release_of
from ..outputs.measured import Figure, StepFigure
from ..config.schema import KSelectConfig
from ..outputs.selection import GroupSelection
from ..config.vocab import claim_dtype, path_id


def kv_tag(g: GroupSelection, model_dtype: str) -> str:
    return claim_dtype(g.kv_cache_dtype, model_dtype)


def verified(g: GroupSelection) -> bool:
    return bool(g.claims) and all(c.status == "verified" for c in g.claims)


def entry(data, g: GroupSelection, cfg: KSelectConfig, phase: str) -> perf.PerfEntry | None:
    """The measured bucket nearest group g's shape at the objective's operating point for this phase, at
    the page g's kernel reads."""
    pt = getattr(cfg.objective, phase)
    shape = perf.KernelShape(path_id(g.backend, g.flash_attn_version, g.build), kv_tag(g, cfg.model.dtype), g.head_size,
                             g.sliding_window, g.num_kv_heads, g.kernel_block_size)
    return perf.nearest(data, shape, phase, pt.batch, pt.context)


def figure(data, g: GroupSelection, cfg: KSelectConfig, phase: str) -> Figure | None:
    """Group g's measured time per layer call. Where the model's measured prefill step at this point is
    host-bound (perf.StepEntry), a prefill call costs at least its host time."""
    e = entry(data, g, cfg, phase)
    if e is None:
        return None
    host = e.host_ms if phase == "prefill" and e.host_ms and e.host_ms > e.ms and host_bound(data, cfg) else None
    # a group's backend plans on the host once per prefill step while the GPU waits: its layers share that
    plan = e.plan_ms if phase == "prefill" and e.plan_ms else None
    ms = (host or e.ms) + (plan / len(g.layers) if plan else 0.0)
    return Figure(backend=g.label, ms=ms, bucket=e.bucket, kernel_ms=e.ms if host or plan else None, fence=e.fence,
                  plan_ms=plan, host_bound=host is not None, host_ms=e.host_ms if phase == "prefill" else None,
                  other_version=other_versions(e.kernel, e.versions, release_of(cfg.ruleset.name)))


def host_bound(data, cfg: KSelectConfig) -> bool:
    st = step_figure(data, cfg)
    return st is not None and st.host_bound


def step_figure(data, cfg: KSelectConfig) -> StepFigure | None:
    pt = cfg.objective.prefill
    st = perf.nearest_step(data, cfg.model.name, "prefill", pt.batch, pt.context)
    return StepFigure(step=st.key, wall_ms=st.wall_ms, kernel_ms=st.kernel_ms, host_bound=st.host_bound) if st else None


def point(cfg: KSelectConfig, phase: str) -> str:
    pt = getattr(cfg.objective, phase)
    return f"B{pt.batch} x {pt.context}"


def noise_why(cfg, chosen: Figure, fastest: Figure, decides: str) -> str:
    """Why a phase runs a kernel slower than the fastest measured one: within the declared noise band
    (objective.tie, conf/objective/<name>.yaml; docs/objective.md) `decides`; beyond it, the request as a whole."""
    gap = chosen.ms / fastest.ms - 1 if fastest.ms > 0 else 0.0
    band = f"objective.tie {cfg.objective.tie:.0%}, conf/objective/{cfg.objective.name}.yaml"
    if gap <= cfg.objective.tie + 1e-9:
        return (f"within the noise band of the fastest, {fastest.backend} {fastest.ms:.4g} ms ({gap:.1%} faster; "
                f"noise band: {band}): {decides}")
    return (f"{fastest.backend} is {gap:.1%} faster in this phase alone, beyond the noise band ({band}): the request "
            "as a whole (prefill + decode steps over one cache block) is faster with this choice")
