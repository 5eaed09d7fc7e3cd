"""A checking backend: every attention call runs the selected backend and TORCH_REFERENCE on the
same inputs (q, the same paged cache, metadata, scales), returns the selected backend's output
and records the relative error of that call (kernels/tolerances.py's rel_err: non-finite output
is NaN and never passes). It is how the main job and kselect/measurement/e2e/ check numerics layer by
layer: each kernel is held to its own bar, not to drift that compounds over 60 layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .base import AttentionBackend, AttentionMetadata, LayerParams
from ..kernels.tolerances import passes, rel_err


@dataclass
class CallErrors:
    """Relative errors of one group's attention calls, in call order."""

    errors: list[float] = field(default_factory=list)

    @property
    def worst(self) -> float:
        """The largest error; NaN when any call produced non-finite output."""
        if any(math.isnan(e) for e in self.errors):
            return math.nan
        return max(self.errors, default=0.0)

    def ok(self, tol: float) -> bool:
        return bool(self.errors) and all(passes(e, tol) for e in self.errors)


class CheckingBackend(AttentionBackend):
    def __init__(self, selected: AttentionBackend, reference: AttentionBackend, record: CallErrors):
        super().__init__(selected.group)
        self.selected, self.reference, self.record = selected, reference, record
        self.name, self.kernel_build = selected.name, selected.kernel_build

    def forward(self, q, k_cache, v_cache, meta: AttentionMetadata, layer: LayerParams):
        out = self.selected.forward(q, k_cache, v_cache, meta, layer)
        ref = self.reference.forward(q, k_cache, v_cache, meta, layer)
        self.record.errors.append(rel_err(out, ref))
        return out

    def query_scale(self, meta, layer, kv_dtype):
        return None  # the reference takes q in the model dtype: the selected backend quantizes its own copy

    def supports_cuda_graphs(self) -> bool:
        return False  # the comparison runs eagerly, call by call
