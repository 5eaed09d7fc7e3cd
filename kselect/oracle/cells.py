"""The oracle grid: one cell = one environment both vLLM and kselect resolve.

A cell names what a vLLM user sets (GPU capability, model preset, --kv-cache-dtype, vision
mode, --attention-config backend / flash_attn_version, MTP) and maps it to kselect overrides.
The oracle (`kselect oracle`, kselect/oracle/) writes one record per cell keyed by `Cell.key`.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from kselect.selector.config.vocab import group_id

# capability -> kselect platform preset (conf/platform/<name>.yaml)
PLATFORMS = {"8.0": "sm80", "8.9": "sm89", "9.0": "sm90", "10.0": "sm100", "12.0": "sm120"}
MODELS = ("gemma4_e2b", "gemma4_e4b", "gemma4_26b_a4b", "gemma4_31b")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
FA_PINS = (None, 3, 4)
BACKEND_PINS = ("auto", "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
SPEC = ("none", "mtp")
# the fields compared per KV-cache group, and the per-cell error check
GROUP_FIELDS = ("backend", "fa_version", "kernel_block", "kv_block", "quant_query")
FIELDS = GROUP_FIELDS + ("error",)


@dataclass(frozen=True)
class Cell:
    cc: str  # compute capability, "9.0"
    model: str  # conf/model preset
    kv_cache: str  # conf/kv_cache preset = vLLM --kv-cache-dtype
    multimodal: bool  # vision mode (mm-prefix); false = --language-model-only
    fa: int | None  # attention_config.flash_attn_version pin
    backend: str  # attention_config.backend pin, or "auto"
    spec: str  # "none" | "mtp" (the preset's drafter as a gemma4_assistant model)

    @property
    def key(self) -> str:
        return (f"cc={self.cc}|model={self.model}|kv={self.kv_cache}|mm={int(self.multimodal)}"
                f"|fa={self.fa or '-'}|backend={self.backend}|spec={self.spec}")

    @property
    def platform(self) -> str:
        return PLATFORMS[self.cc]

    @property
    def capability(self) -> tuple[int, int]:
        major, minor = self.cc.split(".")
        return int(major), int(minor)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Cell:
        return cls(**{k: d[k] for k in ("cc", "model", "kv_cache", "multimodal", "fa", "backend", "spec")})

    def kselect_overrides(self, rules: str | None = None) -> list[str]:
        """The `kselect select` overrides for this cell (the model dtype is the preset's)."""
        o = [f"platform={self.platform}", f"model={self.model}", f"kv_cache={self.kv_cache}",
             f"model.multimodal={str(self.multimodal).lower()}", f"spec_decode={self.spec}"]
        if self.fa is not None:
            o.append(f"attention.flash_attn_version={self.fa}")
        if self.backend != "auto":
            o.append(f"attention.backend={self.backend}")
        if rules:
            o.append(f"rules={rules}")
        return o


def grid(ccs=tuple(PLATFORMS), models=MODELS, kv_dtypes=KV_DTYPES, multimodal=(False, True),
         fa_pins=FA_PINS, backends=BACKEND_PINS, spec=SPEC) -> list[Cell]:
    """The full grid (5 x 4 x 6 x 2 x 3 x 4 x 2 = 5,760 cells), or a slice of it."""
    return [Cell(c, m, k, mm, fa, b, s)
            for c, m, k, mm, fa, b, s in itertools.product(ccs, models, kv_dtypes, multimodal, fa_pins, backends, spec)]


group_key = group_id  # how a record names a KV-cache group (the selector's vocabulary)
