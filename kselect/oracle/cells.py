"""The oracle grids: one cell = one environment both vLLM and kselect resolve.

`grid()`: the Gemma-4 grid (the default). `models_grid()`: the #42 presets of other model families
(docs: /work/notes/design42.md), each with its family's backend pins, no vision, MTP or FA pin; the
cell keys have the one format.

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
# the `models` grid: the non-Gemma presets (conf/model/<name>.yaml, `architecture: hf`) and the
# backend pins of each family (besides auto), as vLLM 0.34.0's registry names them
HF_MODELS = ("llama3_1_8b", "qwen3_8b", "mistral_7b_v0_3", "gemma3_1b", "gpt_oss_20b", "gpt_oss_120b",
             "deepseek_v3", "kimi_k2", "deepseek_v3_2", "qwen3_next_80b_a3b", "nemotron_h_8b", "jamba_mini_1_7",
             "llama4_scout", "llama3_1_8b_fp8_modelopt", "llama3_1_8b_fp8_kv_ct", "qwen2_5_7b_awq")
ATTENTION_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
MLA_BACKENDS = ("FLASHMLA", "FLASH_ATTN_MLA", "FLASHINFER_MLA", "CUTLASS_MLA", "TRITON_MLA")
SPARSE_MLA_BACKENDS = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE")
MODEL_BACKENDS = {m: ATTENTION_BACKENDS for m in HF_MODELS}
MODEL_BACKENDS.update(deepseek_v3=MLA_BACKENDS, kimi_k2=MLA_BACKENDS, deepseek_v3_2=SPARSE_MLA_BACKENDS)
MODELS_KV_DTYPES = ("auto", "fp8")
MODELS_BACKEND_PINS = ("auto",) + ATTENTION_BACKENDS + MLA_BACKENDS + SPARSE_MLA_BACKENDS
GRIDS = ("gemma4", "models", "registry", "wrappers")
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


def models_grid(ccs=tuple(PLATFORMS), models=HF_MODELS, kv_dtypes=MODELS_KV_DTYPES,
                backends=MODELS_BACKEND_PINS) -> list[Cell]:
    """The `models` grid (16 presets x 5 capabilities x 2 KV dtypes x auto + the family's backends:
    4 pins for the 13 attention models, 6 for the 2 MLA ones, 4 for sparse MLA = 680 cells), or a slice of it: a
    backend in `backends` that is not one of a model's family makes no cell for that model."""
    return [Cell(c, m, k, False, None, b, "none")
            for c, m, k in itertools.product(ccs, models, kv_dtypes)
            for b in ("auto",) + MODEL_BACKENDS[m] if b in backends]


group_key = group_id  # how a record names a KV-cache group (the selector's vocabulary)
