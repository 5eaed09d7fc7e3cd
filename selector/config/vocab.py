"""The selector's vocabulary, declared once: layer-group kinds and ids, KV-cache dtypes, and the
capability-claim id grammar (built and parsed here only). Pure: no pydantic, no torch; every
layer of the project may import it (`kselect.selector.config.vocab`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# ---------------------------------------------------------------- layer groups

# One kind per vLLM KV-cache spec class: FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec,
# MLAAttentionSpec and MambaSpec (vllm/v1/kv_cache_interface.py); a model's layers of one kind form one group.
GroupKind = Literal["sliding_window", "full_attention", "chunked_local", "mla", "mla_indexer", "mamba"]
LayerType = Literal["sliding_attention", "full_attention"]  # Gemma-4's layer_types values
GROUP_KINDS: tuple[GroupKind, ...] = ("sliding_window", "full_attention", "chunked_local", "mla", "mla_indexer", "mamba")
# kinds whose backend is fixed by their layer type (no priority list, no pin): mamba states, and the key cache of
# DeepSeek-V3.2's sparse-attention indexer (DeepseekV32IndexerCache); they stay out of the cache-block choice
FIXED_KINDS = ("mamba", "mla_indexer")
LAYER_TYPE: dict[str, str] = {"sliding_window": "sliding_attention", "full_attention": "full_attention"}
KIND_OF_LAYER_TYPE: dict[str, str] = {t: k for k, t in LAYER_TYPE.items()}
MODEL_GROUP = "model"  # the group id of selection-level records (not one layer group)
_DRAFT = "draft:"


def token_bytes(kind: str, num_kv_heads: int, head_size: int, dtype_bytes: int) -> int:
    """What one cached token of a layer costs: K and V per KV head, or one latent (MLA) or key (indexer) vector.
    A mamba layer keeps a state per sequence instead (0 here)."""
    if kind == "mamba":
        return 0
    return (1 if kind in ("mla", "mla_indexer") else 2) * num_kv_heads * head_size * dtype_bytes


def group_id(kind: str, draft: bool = False) -> str:
    """A layer group's id in records, outputs and diffs: the kind, `draft:` + kind for MTP drafts."""
    return _DRAFT + kind if draft else kind


def parse_group_id(gid: str) -> tuple[str, bool]:
    """(kind, draft) of a group id."""
    return (gid[len(_DRAFT) :], True) if gid.startswith(_DRAFT) else (gid, False)


# ---------------------------------------------------------------- KV-cache dtypes

FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")  # `fp8` is fp8_e4m3 once resolved
KV_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}
DTYPE_OF_SHORT = {short: name for name, short in SHORT_DTYPE.items()}  # bf16 -> bfloat16, fp8 -> fp8_e4m3
MODEL_DTYPES = ("bfloat16", "float16", "float32")


def is_fp8(dtype: str) -> bool:
    """An FP8 KV-cache dtype name (requested or resolved)."""
    return dtype in FP8_KV_DTYPES


def claim_model_dtype(claim_dtype: str) -> str:
    """The model dtype a claim dtype's kernel runs under: its own, bfloat16 under an FP8 cache."""
    name = DTYPE_OF_SHORT.get(claim_dtype)
    return name if name in MODEL_DTYPES else "bfloat16"


def resolve_kv_dtype(kv_dtype: str, model_dtype: str) -> str:
    """`auto` -> the model dtype, `fp8` -> fp8_e4m3, anything else as is."""
    if kv_dtype == "auto":
        return model_dtype
    return "fp8_e4m3" if kv_dtype == "fp8" else kv_dtype


# ---------------------------------------------------------------- capability claims

CLAIM_DTYPES = ("bf16", "fp16", "fp32", "fp8", "fp8_e5m2")  # fp8*: a bf16 model over that FP8 cache
CLAIM_FEATURES = ("causal", "window", "mm_prefix", "sinks", "quant_query")  # and page<N>
# the one grammar of kernel path ids (path_id: `<backend>[_v<N>][+<build>]`) and claim ids; perf and conformance
# files validate against these, parse_claim reads the named groups
PATH_RE = r"(?P<backend>[A-Z][A-Z0-9_]*?)(?:_v(?P<ver>\d+))?(?:\+(?P<build>[a-z][a-z0-9_]*))?"
CLAIM_RE = (rf"{PATH_RE}:(?P<dtype>{'|'.join(CLAIM_DTYPES)}):d(?P<head>\d{{1,4}}):"
            rf"(?P<feature>{'|'.join(CLAIM_FEATURES)}|page\d{{1,4}})")
_CLAIM = re.compile(rf"^{CLAIM_RE}$")


# Kernel builds a backend can run besides the one vLLM ships, each with the platform package flag that says it is
# installed (conf/platform `packages`). Only an objective chooses one (selector/measure/builds.py); vLLM cannot run it.
# upstream: FA3 from flash-attention's hopper/ (kselect/measurement/builds/build_fa3_hopper.sh), not vLLM's FA3 build.
# kselect: kselect's own Triton paged kernel (kernels/triton_paged.py), not vLLM's unified_attention; it runs
# wherever triton does (platform.packages.kselect_triton: on in every platform with triton, and where detected).
ALT_BUILDS: dict[tuple[str, int | None], dict[str, str]] = {("FLASH_ATTN", 3): {"upstream": "fa3_upstream"},
                                                            ("TRITON_ATTN", None): {"kselect": "kselect_triton"}}


@dataclass(frozen=True)
class Claim:
    """`<backend>[_v<fa version>][+<build>]:<dtype>:d<head>:<feature>`, e.g. `FLASH_ATTN_v4:fp8:d256:window`,
    `FLASH_ATTN_v3+upstream:fp8:d256:window` (a build other than vLLM's: ALT_BUILDS)."""

    backend: str
    version: int | None
    dtype: str
    head: int
    feature: str
    build: str | None = None

    @property
    def id(self) -> str:
        return f"{path_id(self.backend, self.version, self.build)}:{self.dtype}:d{self.head}:{self.feature}"

    @property
    def fp8(self) -> bool:
        """The claim runs over an FP8 cache (quant_query implies one)."""
        return self.dtype.startswith("fp8") or self.feature == "quant_query"

    @property
    def page(self) -> int | None:
        """The page size a `page<N>` claim names."""
        return int(self.feature[4:]) if self.feature.startswith("page") else None

    @property
    def kv_cache_dtype(self) -> str | None:
        """The resolved FP8 cache dtype, None for a model-dtype cache."""
        if not self.fp8:
            return None
        return "fp8_e5m2" if self.dtype == "fp8_e5m2" else "fp8_e4m3"

    @property
    def model_dtype(self) -> str:
        return claim_model_dtype(self.dtype)


def path_id(backend: str, version: int | None, build: str | None = None) -> str:
    """A kernel path: the backend, with `_v<N>` for a FlashAttention version and `+<build>` for a build other than
    the one vLLM ships (ALT_BUILDS)."""
    return (f"{backend}_v{version}" if version else backend) + (f"+{build}" if build else "")


def kernel_label(backend: str, version: int | None, build: str | None = None) -> str:
    """How outputs name a kernel path: `FLASH_ATTN v3`, `FLASH_ATTN v3+upstream`, `FLASHINFER`."""
    return backend + (f" v{version}" if version else "") + (f"+{build}" if build else "")


def parse_kernel_label(label: str) -> tuple[str, int | None, str | None]:
    """(backend, version, build) of a kernel label (kernel_label's inverse)."""
    base, _, build = label.partition("+")
    backend, _, ver = base.partition(" v")
    return backend, int(ver) if ver.isdigit() else None, build or None


def parse_path(path: str) -> tuple[str, int | None, str | None]:
    """(backend, version, build) of a kernel path id (path_id's inverse)."""
    base, _, build = path.partition("+")
    backend, _, ver = base.partition("_v")
    return backend, int(ver) if ver.isdigit() else None, build or None


def check_build(path: str) -> None:
    """Raise ValueError where a kernel path names a build that ALT_BUILDS does not list for its backend: a file
    that names one would never be read (no selection runs it), so it is refused, not ignored."""
    backend, ver, build = parse_path(path)
    builds = ALT_BUILDS.get((backend, ver), {})
    if build and build not in builds:
        raise ValueError(f"kernel path {path!r} names build {build!r} of {path_id(backend, ver)}; allowed: "
                         + (", ".join(builds) if builds else "none (only the build vLLM ships)"))


def claim_dtype(kv_cache_dtype: str, model_dtype: str) -> str:
    """The dtype part of a claim id: the FP8 cache's, else the model's."""
    return SHORT_DTYPE[kv_cache_dtype] if is_fp8(kv_cache_dtype) else SHORT_DTYPE[model_dtype]


MAX_CLAIM_HEAD, MAX_CLAIM_PAGE = 1024, 4096  # a claim's test case is allocated from these: bounded first


def parse_claim(claim_id: str) -> Claim:
    m = _CLAIM.match(claim_id.strip()) if isinstance(claim_id, str) and len(claim_id) <= 200 else None
    if not m:
        raise ValueError(f"bad claim id {claim_id!r}: want <backend>[_v<N>][+<build>]:<dtype>:d<head>:<feature>")
    ver, head = int(m["ver"]) if m["ver"] else None, int(m["head"])
    page = int(m["feature"][4:]) if m["feature"].startswith("page") else 16
    if not (1 <= head <= MAX_CLAIM_HEAD and 1 <= page <= MAX_CLAIM_PAGE and (ver is None or 2 <= ver <= 4)):
        raise ValueError(f"bad claim id {claim_id!r}: head 1..{MAX_CLAIM_HEAD}, page 1..{MAX_CLAIM_PAGE}, FlashAttention version 2..4")
    try:
        check_build(path_id(m["backend"], ver, m["build"]))
    except ValueError as e:
        raise ValueError(f"bad claim id {claim_id!r}: {e}") from None
    return Claim(m["backend"], ver, m["dtype"], head, m["feature"], m["build"])

# The facts a rule's matcher (`when`) or effect (`{from: fact}`) may read, with what each is: each name is a
# field of the frozen record rules/facts.py builds per group (`Facts.get(name)`). No eval: nothing else can be read.
FACTS: dict[str, str] = {
    "platform.name": "platform preset name (sm90, cpu, ...)",
    "platform.vendor": "nvidia / amd / intel / cpu",
    "platform.device": "cuda / rocm / xpu / cpu",
    "platform.cc_major": "compute capability major (null off CUDA)",
    "platform.cc_minor": "compute capability minor",
    "platform.gpu_model": "GPU model key (nvidia_h200, ...)",
    "platform.packages.fa2": "FlashAttention 2 installed",
    "platform.packages.fa3": "FlashAttention 3 installed",
    "platform.packages.fa4": "FlashAttention 4 installed",
    "platform.packages.flashinfer": "FlashInfer installed",
    "platform.packages.triton": "Triton installed",
    "model.name": "model preset name",
    "model.architecture": "gemma4, or the Hugging Face architecture of an `architecture: hf` model (LlamaForCausalLM, ...)",
    "model.family": "gemma4 / dense / sliding / mla / hybrid_mamba / chunked_local (selector/config/hf_arch.py)",
    "model.dtype": "bfloat16 / float16 / float32",
    "model.multimodal": "bidirectional mm-prefix mask (Gemma-4 vision mode; a Gemma-3 wrapper serving images)",
    "model.head_size": "model-level head size (max over layers, as vLLM's get_head_size)",
    "model.mixed_head_sizes": "layers have different head sizes",
    "model.gqa": "query heads per KV head > 1 at the model level (vLLM's get_num_attention_heads // get_num_kv_heads)",
    "model.num_heads": "query heads per layer (vLLM's get_num_attention_heads; the MLA priority lists read it)",
    "model.qk_nope_head_dim": "an MLA config's qk_nope_head_dim (null: absent); MLA backends check it",
    "model.qk_rope_head_dim": "an MLA config's qk_rope_head_dim (null: absent)",
    "model.kv_lora_rank": "an MLA config's kv_lora_rank (null: absent)",
    "model.index_topk": "a sparse MLA config's index_topk (null: absent)",
    "model.softcap": "the config sets attn_logit_softcapping (Gemma-2): FA4's head-256 kernel takes none",
    "kv.dtype": "kv_cache.dtype as configured (auto, fp8, ...); auto: the one a quantized checkpoint names, if any",
    "kv.quantized": "the KV cache is FP8",
    "kv.scales": "unit / calibrated",
    "kv.block_size": "user block size (null: not set)",
    "spec.method": "none / mtp",
    "spec.copy_target_kv_scales": "draft layers use the target's K/V scales (resolved)",
    "pin.backend": "effective backend pin for the model (null: auto)",
    "pin.flash_attn_version": "effective FlashAttention version pin (null: unset)",
    "group.kind": "sliding_window / full_attention / chunked_local / mla / mla_indexer / mamba",
    "group.sinks": "the group's layers have attention sinks (gpt-oss)",
    "group.sparse": "the group's MLA layers are sparse (an indexer picks the keys: DeepSeek-V3.2)",
    "group.mamba_type": "a fixed-backend group's layer type: mamba1 / mamba2 / gdn / linear / short_conv (vLLM's "
    "MambaAttentionBackendEnum member, lower-cased as the oracle records it: MAMBA1, MAMBA2, GDN_ATTN, LINEAR, "
    "SHORT_CONV), deepseek_v32_indexer (null: an attention group)",
    "group.head_size": "head size of this layer group",
    "group.num_kv_heads": "KV heads of this layer group",
    "group.sliding_window": "the group uses a sliding window",
    "group.kv_block": "the group's KV-cache block, once the blocks are known (null at layer init: init rules only)",
    "group.draft": "an MTP drafter group",
    "fa.head_size": "the head size a FlashAttention version is being resolved for (null: none given)",
    "fa.version": "FlashAttention version resolved for this group's head size (null: none)",
    "fa.version_default": "FlashAttention version resolved with no head size",
    "fa.version_model_head": "FlashAttention version resolved for the model-level head size",
    "candidate.backend": "the backend being validated / the selected backend",
    "candidate.mm_prefix": "the candidate must serve the mm-prefix mask (false for drafts and a composite's causal child)",
    "kb.context": "kernel blocks asked for a group's KV spec (group) or without one (model)",
    "kb.head_size": "the head size kernel blocks are asked for (group: the group's; model: model-level)",
    "kb.fa_version": "the FlashAttention version at kb.head_size",
}
