"""The numerics check of a selection: replay a generation teacher-forced on the selected backends,
with every attention call compared against TORCH_REFERENCE on the same inputs
(backends/checking.py), and hold each group's kernel to its own bar (kernels/tolerances.py: the
model dtype's, or the FP8 bar for an FP8 cache or quantized q). A group whose selected backend is
TORCH_REFERENCE is not checked (it would compare the reference with itself) and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..backends.checking import CallErrors, CheckingBackend
from ..backends.registry import make_backend
from ..kernels.tolerances import tolerance


@dataclass
class GroupCheck:
    group: str
    backend: str  # what ran, e.g. "FLASH_ATTN v4"
    calls: int
    worst: float  # NaN: some call gave non-finite output
    tolerance: float
    checked: bool  # False: the selected backend is the reference itself

    @property
    def ok(self) -> bool:
        return not self.checked or (self.calls > 0 and not math.isnan(self.worst) and self.worst <= self.tolerance)

    def line(self) -> str:
        if not self.checked:
            return f"{self.group}: {self.backend} is the reference itself; not compared"
        verdict = "ok" if self.ok else ("FAILED: non-finite output" if math.isnan(self.worst) else f"FAILED (> {self.tolerance:g})")
        return (f"{self.group}: {self.backend} vs TORCH_REFERENCE on the same inputs, {self.calls} attention calls, "
                f"max rel err {self.worst:.2e} (bar {self.tolerance:g}): {verdict}")


def check_attention(model, groups, prompts, forced, *, max_len: int, kv_scales=None, mm_spans=None,
                    engine_cls=None) -> list[GroupCheck]:
    """groups: the engine's groups (kind -> GroupSelection); forced: the tokens to replay."""
    from .engine import Engine, EngineConfig, reference_groups  # noqa: PLC0415

    engine_cls = engine_cls or Engine
    refs = reference_groups(groups)
    records = {k: CallErrors() for k in groups}
    backends = {}
    for k, g in groups.items():
        sel = make_backend(g)
        backends[k] = sel if g.backend == "TORCH_REFERENCE" else CheckingBackend(sel, make_backend(refs[k]), records[k])
    config = EngineConfig(max_seqs=len(prompts), max_seq_len=max_len, kv_scales=kv_scales, cuda_graphs=False)
    eng = engine_cls(model, groups, config, backends=backends)
    eng.generate(prompts, len(forced[0]) if forced else 1, forced=forced, stop_at_eos=False, mm_spans=mm_spans)
    out = []
    for k, g in groups.items():
        fp8 = g.kv_cache_dtype.startswith("fp8") or g.quant_query
        rec = records[k]
        out.append(GroupCheck(k, g.label, len(rec.errors), rec.worst, tolerance(model.dtype, fp8=fp8),
                              checked=g.backend != "TORCH_REFERENCE"))
    return out
