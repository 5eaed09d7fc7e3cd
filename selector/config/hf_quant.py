"""A checkpoint's `quantization_config` -> the KV-cache dtype vLLM 0.34.0 takes for `--kv-cache-dtype auto`, and
what it refuses. Two places decide it in vLLM:

- the engine (vllm/utils/torch_utils.py, `resolve_kv_cache_dtype_string`): a ModelOpt checkpoint's
  `kv_cache_scheme` / `kv_cache_quant_algo` (in its `quantization` object or at the top) makes `auto` fp8_e4m3;
  an unrecognised value stays `auto` (vLLM logs a warning);
- each attention layer (vllm/model_executor/layers/attention/attention.py, `Attention.__init__`): a
  compressed-tensors checkpoint with a `kv_cache_scheme` makes `auto` fp8 (MLA layers do not read it).

The quant method is normalised first as vllm/transformers_utils/model_arch_config_convertor.py does (ModelOpt
exports name their producer, not a method). Only JSON values are read."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.hf_arch import text_config

MODELOPT_KV = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}  # vLLM's MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP
MODELOPT_ALGOS = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
                  "NVFP4": "modelopt_fp4", "MIXED_PRECISION": "modelopt_mixed"}
KV_KEYS = ("kv_cache_scheme", "kv_cache_quant_algo")
# quant methods whose attention layers load KV scales (a BaseKVCacheMethod), so vLLM refuses fp8_e5m2
# ("fp8_e5m2 kv-cache is not supported with fp8 checkpoints", attention.py `_init_kv_cache_quant`)
E5M2_REFUSED = ("fp8",)


@dataclass(frozen=True)
class CheckpointKV:
    """What a checkpoint's quantization_config says about the KV cache."""

    method: str  # the normalised quant_method
    dtype: str | None  # what `auto` becomes (vLLM's string: fp8_e4m3, fp8, ...); None: the model dtype
    setting: str  # the field that decided, e.g. `kv_cache_quant_algo=FP8`

    @property
    def source(self) -> str:
        return f"the checkpoint's quantization_config: {self.method} {self.setting}"


def quant_config(hc: dict) -> dict | None:
    """The checkpoint's quantization_config (or compressed-tensors' compression_config; a multimodal
    wrapper's text_config holds it otherwise), its quant_method normalised as vLLM does."""
    qc = hc.get("quantization_config")
    qc = hc.get("compression_config") if qc is None else qc
    where = "model.hf_config.quantization_config"
    if qc is None and isinstance(hc.get("text_config"), dict):
        t, w = text_config(hc)
        qc, where = t.get("quantization_config", t.get("compression_config")), f"{w}.quantization_config"
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ValueError(f"{where}: got {type(qc).__name__}; allowed: an object (the checkpoint's quantization_config)")
    qc = dict(qc)
    inner = qc.get("quantization", {})
    producer = qc.get("producer") if isinstance(qc.get("producer"), dict) else {}
    modelopt = producer.get("name") == "modelopt" or (isinstance(inner, dict) and "modelopt_quant_config" in inner)
    if modelopt and isinstance(inner, dict) and inner.get("quant_algo") is not None:
        algo = str(inner["quant_algo"]).upper()
        if algo not in MODELOPT_ALGOS:
            raise ValueError(f"{where}.quantization.quant_algo={inner['quant_algo']!r}: vLLM 0.34.0 refuses it "
                             f"(unknown ModelOpt quant algo); allowed: {', '.join(MODELOPT_ALGOS)}")
        qc["quant_method"] = MODELOPT_ALGOS[algo]
    method = qc.get("quant_method", "")
    if not isinstance(method, str):
        raise ValueError(f"{where}.quant_method: got {method!r}; allowed: a string")
    qc["quant_method"] = method.lower().replace("compressed_tensors", "compressed-tensors")
    return qc


def checkpoint_kv(hc: dict, attention: bool = True) -> CheckpointKV | None:
    """What `kv_cache=auto` becomes for this checkpoint, or None when its quantization_config says nothing
    about the KV cache. ValueError (exit 2) for a KV scheme vLLM refuses or kselect does not model. `attention`:
    the model has (non-MLA) attention layers, the only ones that read a compressed-tensors kv_cache_scheme."""
    qc = quant_config(hc)
    if qc is None:
        return None
    method = qc["quant_method"]
    if method.startswith("modelopt"):  # the engine reads the top-level quantization_config only
        return _modelopt_kv(qc, method) if hc.get("quantization_config") is not None else None
    if method == "compressed-tensors" and qc.get("kv_cache_scheme") is not None and attention:
        return _compressed_tensors_kv(qc["kv_cache_scheme"])
    return None


def _modelopt_kv(qc: dict, method: str) -> CheckpointKV | None:
    inner = qc.get("quantization", qc)
    if not isinstance(inner, dict):
        raise ValueError(f"model.hf_config.quantization_config.quantization: got {type(inner).__name__}; "
                         "allowed: an object (ModelOpt's hf_quant_config.json layout)")
    key, algo = next(((k, src[k]) for k in KV_KEYS for src in (inner, qc) if src.get(k)), (None, None))
    if algo is None:
        return None
    setting = f"{key}={algo}"
    if isinstance(algo, dict):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            algo = "fp8"
        elif algo.get("num_bits") == 4 and algo.get("type") == "float":
            algo = "nvfp4"
        else:
            return CheckpointKV(method, None, f"{setting} (not recognised: vLLM keeps auto)")
    if not isinstance(algo, str):
        return None
    dtype = MODELOPT_KV.get(algo.lower())
    if dtype is None:
        return CheckpointKV(method, None, f"{setting} (not recognised: vLLM keeps auto)")
    if dtype == "nvfp4":
        raise ValueError(f"model.hf_config.quantization_config {setting}: vLLM 0.34.0 runs an NVFP4 KV cache for "
                         "this checkpoint, which kselect does not model; allowed: an FP8 or unquantized KV cache")
    return CheckpointKV(method, dtype, setting)


def _compressed_tensors_kv(scheme) -> CheckpointKV:
    """vLLM's CompressedTensorsKVCacheMethod.validate_kv_cache_scheme, then `auto` -> fp8 in each layer."""
    w = "model.hf_config.quantization_config.kv_cache_scheme"
    if not isinstance(scheme, dict):
        raise ValueError(f"{w}: got {scheme!r}; allowed: an object (num_bits, type, strategy, symmetric)")
    if scheme.get("type") != "float" or scheme.get("num_bits") != 8:
        raise ValueError(f"{w}: num_bits={scheme.get('num_bits')!r}, type={scheme.get('type')!r}; vLLM 0.34.0 "
                         "supports num_bits=8, type=float only")
    if scheme.get("strategy") not in ("tensor", "attn_head"):
        raise ValueError(f"{w}.strategy={scheme.get('strategy')!r}; vLLM 0.34.0 supports tensor or attn_head")
    if not scheme.get("symmetric"):
        raise ValueError(f"{w}.symmetric={scheme.get('symmetric')!r}; vLLM 0.34.0 supports symmetric scales only")
    if scheme["strategy"] == "attn_head":
        raise ValueError(f"{w}.strategy='attn_head': per-head KV scales narrow vLLM's backend choice in a way "
                         "kselect does not model; allowed: strategy tensor")
    return CheckpointKV("compressed-tensors", "fp8", "kv_cache_scheme=fp8 (num_bits 8, float, per tensor)")


def refuses_e5m2(hc: dict, mla: bool) -> str | None:
    """Why vLLM refuses `kv_cache=fp8_e5m2` for this checkpoint's layers (None: it does not): their quant method
    loads FP8 KV scales. ModelOpt gives every attention and MLA layer that method; fp8 and compressed-tensors
    with a kv_cache_scheme give it to (non-MLA) attention layers."""
    qc = quant_config(hc)
    if qc is None:
        return None
    m = qc["quant_method"]
    ct = m == "compressed-tensors" and qc.get("kv_cache_scheme") is not None
    if m.startswith("modelopt") or ((m in E5M2_REFUSED or ct) and not mla):
        return f"its quant method {m} loads FP8 KV-cache scales (fp8_e5m2 kv-cache is not supported with fp8 checkpoints)"
    return None
