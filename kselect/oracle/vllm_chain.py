"""Run vLLM's own attention selection for one oracle cell (kselect/oracle/worker.py drives it).

Runs inside a release's own CPU venv (kselect/oracle/env.py builds it), never in kselect's: it
imports vLLM and the standard library only, no kselect module. One GPU capability per process: the capability is
the one thing mocked (`NonNvmlCudaPlatform.get_device_capability`). What is stubbed is what a
CPU machine lacks: vLLM's compiled extensions (empty modules, so FA2/FA3 count as built; the
real capability gates in vllm_flash_attn decide), FlashInfer and torchvision (stubs/ beside this file).
The model is built on the meta device from a config.json written from our preset (no weights;
kselect/oracle/models.py writes it, on kselect's side): a Gemma-4 preset's, or any other model's
published config.json (`architecture: hf`, #42). For those, what a CPU also lacks is stood in for:
the auxiliary CUDA stream and its events, tensors a layer puts on the CUDA device itself (made on
meta), the worker's workspace manager (on meta), vLLM's vendored DeepGEMM (importable, kernels
placeholders), and the expert-parallel group an MoE model needs (the model-parallel groups are made
again when a cell's model is MoE and the last one's was not, or the other way round).

The chain, as vLLM 0.33.0 runs it when an engine starts:
  EngineArgs -> create_engine_config (Gemma4Config.verify_and_update_config)
  model init: every attention layer (Attention, MLAAttention; Mamba-like layers declare their
  backend) calls get_attn_backend (recorded: all candidates + reasons) and builds its impl
  [MTP] Gemma4Speculator.load_draft_model builds the draft layers on the target's KV
  Platform.update_block_size_for_backend -> get_kv_cache_spec (customize_attention_spec)
  -> resolve_kv_cache_layout -> get_global_kv_cache_groups -> get_kv_cache_configs
  -> init_attn_backend (prepare_kernel_block_sizes, select_common_block_size, metadata builders)
Groups are recorded per kind of KV-cache spec (group_kind: full_attention, sliding_window,
chunked_local, mla, mla_indexer, mamba), every layer vLLM registered with a spec in one of them.
An exception is recorded with the stage it came from; nothing after it runs.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback
import types
from pathlib import Path

STUBS = Path(__file__).resolve().parent / "stubs"
# metadata builders allocate their device buffers here (meta: shapes only, no memory)
BUILDER_DEVICE = "meta"
# what the KV planner may use; selection does not depend on it, as long as one request of the model's
# default max_model_len fits (Llama-4-Scout's 10M tokens need ~482 GiB): 1 TiB
KV_MEMORY_BYTES = 2**40
STAGES = ("engine_config", "selection", "layer_init", "draft_init", "block_size", "kv_cache_spec",
          "kv_cache_groups", "metadata_builders", "record")


DEVICE_NAMES = {(8, 0): "NVIDIA A100-SXM4-80GB", (8, 9): "NVIDIA L40S", (9, 0): "NVIDIA H200",
                (10, 0): "NVIDIA B200", (12, 0): "NVIDIA GeForce RTX 5090"}
SM_COUNTS = {(8, 0): 108, (8, 9): 142, (9, 0): 132, (10, 0): 148, (12, 0): 170}
_CC: tuple[int, int] | None = None
_RECORDED: list[dict] = []


def boot(src: str, cc: tuple[int, int]) -> None:
    """Prepare this process for capability `cc`: env, stubs, the CUDA platform."""
    global _CC
    _CC = cc
    _environment(src)
    import _kselect_vllm_ext  # noqa: F401

    from vllm.platforms import cuda

    _mock_device(cuda)
    _stand_ins()
    _record_selection(cuda.CudaPlatformBase)


def _environment(src: str) -> None:
    """vLLM's settings, and the stubs and the release's sources first on the path (of this process and vLLM's own
    subprocesses)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # HAS_TRITON stays on, no driver probed; V2 runner default
    os.environ["VLLM_HAS_FLASHINFER_CUBIN"] = "1"  # stands in for flashinfer-cubin
    # vLLM caches model inspections under VLLM_CACHE_ROOT by file name, not by release: one
    # cache per source tree, or two releases evict each other's (a subprocess per cell)
    home = Path(os.environ.get("KSELECT_VLLM_HOME", Path.home() / ".cache" / "kselect" / "vllm"))
    os.environ.setdefault("VLLM_CACHE_ROOT", str(home / "vllm-cache" / Path(src).resolve().name))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    dist = _flashinfer_dist(src)
    sys.path[:0] = [str(STUBS), dist, src]
    # vLLM's own subprocesses (model inspection) see the same sources and stubs
    os.environ["KSELECT_VLLM_ORACLE"] = "1"
    os.environ["KSELECT_VLLM_SRC"] = src
    os.environ["PYTHONPATH"] = os.pathsep.join([str(STUBS), dist, src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def _mock_device(cuda) -> None:
    """The one thing mocked: the CUDA platform's device (capability _CC, its name and SM count)."""
    import vllm.platforms as platforms
    from vllm.platforms.interface import DeviceCapability

    def get_device_capability(cls, device_id: int = 0):
        return DeviceCapability(major=_CC[0], minor=_CC[1])

    def get_device_name(cls, device_id: int = 0):
        return DEVICE_NAMES.get(_CC, f"NVIDIA GPU sm{_CC[0]}{_CC[1]}")

    def num_compute_units(cls, device_id: int = 0):
        return SM_COUNTS.get(_CC, 132)

    cuda.NonNvmlCudaPlatform.get_device_capability = classmethod(get_device_capability)
    # the device's name and SM count: only an error message (TRITON_ATTN's FP8 refusal) prints
    # the name; the SM count sizes TRITON_ATTN's decode split on SM120 (never the selection)
    cuda.NonNvmlCudaPlatform.get_device_name = classmethod(get_device_name)
    cuda.NonNvmlCudaPlatform.num_compute_units = classmethod(num_compute_units)
    platforms._current_platform = cuda.NonNvmlCudaPlatform()


def _stand_ins() -> None:
    """What a CPU machine lacks, stood in for where layer construction reaches it (never part of selection)."""
    # no pinned host memory without a CUDA driver: the backends' host buffers are plain
    import torch
    import vllm.utils.torch_utils as torch_utils

    torch_utils.PIN_MEMORY = False
    # the one auxiliary CUDA stream (MoE shared experts, GDN, MLA models) is created at layer
    # construction: a stand-in that layers keep and never use here (modules import the function)
    torch_utils._aux_stream = _NoStream()
    torch.cuda.Event = _NoStream  # and the events that sync with it (made beside it, never recorded)
    torch.cuda.Stream = _NoStream  # a layer that makes a stream of its own (Cohere2-MoE's shared experts)
    # FlashInfer's impl allocates its multi-CTA KV counter on the CUDA device at layer init
    import vllm.v1.attention.backends.flashinfer as fi_backend

    fi_backend._get_multi_ctas_kv_counter_buffer = lambda min_bytes, device: torch.empty(0, dtype=torch.uint8)
    # weight-reload bookkeeping walks every parameter of the model after construction: no
    # weights are ever loaded here, and it is most of a cell's time
    import vllm.model_executor.model_loader.utils as loader_utils

    loader_utils.record_metadata_for_reloading = lambda model: None
    _skip_jit_kernels()


def _skip_jit_kernels() -> None:
    """Kernels a layer compiles or imports at construction from a DSL a CPU venv lacks."""
    # an MoE router with fp32 weights registers a CuTeDSL kernel's JIT warmup on SM90 at construction (importing
    # the CUTLASS DSL, which a CPU venv lacks): a warmup, never part of selection
    from vllm.model_executor.layers.fused_moe.router import gate_linear

    for cls in vars(gate_linear).values():
        if isinstance(cls, type) and hasattr(cls, "_register_sm90_bf16x3_warmup"):
            cls._register_sm90_bf16x3_warmup = lambda self: None
    # Flint imports its CuTeDSL decode kernel at construction on SM10x: which decode kernel runs beside
    # FlashInfer is not part of selection (the layer's backend is)
    try:
        import vllm.models.flint.model as flint_model

        flint_model._flint_kernels = lambda quant_config, parallel=None: False
    except ImportError:  # a release without Flint
        pass


class _NoStream:
    """vLLM's auxiliary CUDA stream (and its events) on a machine without CUDA: kept by layers,
    never run on."""

    def __init__(self, *args, **kwargs):
        pass

    def __repr__(self):
        return "<kselect oracle: no CUDA stream>"


def flashinfer_pin(src: str) -> str:
    """The flashinfer-python version the release pins (its wheel's METADATA), else 0.7.2.post1."""
    for meta in sorted(Path(src).glob("vllm-*.dist-info/METADATA")):
        for line in meta.read_text().splitlines():
            m = re.match(r"Requires-Dist: flashinfer-python\s*==\s*([^\s;,]+)", line)
            if m:
                return m.group(1)
    return "0.7.2.post1"


def _flashinfer_dist(src: str) -> str:
    """A folder with the stub's distribution metadata at the release's pinned version: vLLM reads
    it (importlib.metadata) and FLASHINFER_TS gates on `flashinfer.__version__`."""
    version = flashinfer_pin(src)
    os.environ["KSELECT_FLASHINFER_VERSION"] = version
    root = Path(tempfile.mkdtemp(prefix="kselect_flashinfer_dist_"))
    info = root / f"flashinfer_python-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n"
                                   "Summary: stub for the kselect vLLM oracle (no kernels)\n")
    (info / "top_level.txt").write_text("flashinfer\n")
    return str(root)


def _record_selection(platform_cls) -> None:
    """Observe (not change) each get_attn_backend_cls call: the selector's inputs, every
    candidate with its reasons, the choice or the error."""
    orig = platform_cls.get_attn_backend_cls.__func__

    def recording(cls, selected_backend, attn_selector_config, num_heads=None):
        entry = {"head_size": attn_selector_config.head_size,
                 "sliding": attn_selector_config.has_sliding_window,
                 "pinned": selected_backend.name if selected_backend is not None else None,
                 "block_size": attn_selector_config.block_size,
                 "mm_prefix": attn_selector_config.use_mm_prefix}
        try:
            cap = cls.get_device_capability()
            valid, invalid = cls.get_valid_backends(cap, attn_selector_config, num_heads)
            cands = [{"backend": c.backend.name, "priority": c.priority, "reasons": []} for c in valid]
            cands += [{"backend": b.name, "priority": p, "reasons": list(r)} for b, (p, r) in invalid.items()]
            entry["candidates"] = sorted(cands, key=lambda c: c["priority"])
        except Exception as e:  # noqa: BLE001 - the listing is informative only
            entry["candidates_error"] = f"{type(e).__name__}: {e}"
        try:
            path = orig(cls, selected_backend, attn_selector_config, num_heads)
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            _RECORDED.append(entry)
            e.__kselect_stage__ = "selection"
            raise
        entry["selected"] = path
        _RECORDED.append(entry)
        return path

    platform_cls.get_attn_backend_cls = classmethod(recording)


# ------------------------------------------------------------------------- the chain


def engine_kwargs(cell: dict, target: Path, drafter: Path | None) -> dict:
    attn = {}
    if cell["backend"] != "auto":
        attn["backend"] = cell["backend"]
    if cell["fa"] is not None:
        attn["flash_attn_version"] = cell["fa"]
    kw = dict(model=str(target), skip_tokenizer_init=True, load_format="dummy",
              kv_cache_dtype=cell["kv_cache"], language_model_only=not cell["multimodal"])
    if attn:
        kw["attention_config"] = attn
    if cell["spec"] == "mtp":
        kw["speculative_config"] = {"method": "mtp", "model": str(drafter), "num_speculative_tokens": 4}
    return kw


def run_engine_args(engine_args) -> dict:
    """The chain from EngineArgs on: a record of groups, or the error and its stage."""
    _RECORDED.clear()
    _clear_caches()
    out: dict = {"groups": {}, "block_size": None, "error": None, "selections": _RECORDED}
    stage = "engine_config"
    vllm_config = None
    try:
        vllm_config = engine_args.create_engine_config()
        stage = "layer_init"
        _build(vllm_config, out, lambda s: None)
    except BaseException as e:  # noqa: BLE001 - recorded, never swallowed silently
        if isinstance(e, KeyboardInterrupt):
            raise
        st = getattr(e, "__kselect_stage__", None) or out.get("_stage") or stage
        if os.environ.get("KSELECT_ORACLE_DEBUG"):
            traceback.print_exc()
        out["error"] = {"stage": st, "type": type(e).__name__, "message": _one_line(str(e)),
                        "where": _where(e)}
    out.pop("_stage", None)
    out["selections"] = list(_RECORDED)
    if vllm_config is not None:
        # the KV-cache dtype as the engine ended up with it: `auto` resolved from a quantized checkpoint
        # (resolve_kv_cache_dtype_string) or set by its attention layers (a compressed-tensors kv_cache_scheme)
        out["cache_dtype"] = str(vllm_config.cache_config.cache_dtype)
    return out


def _build(vllm_config, out: dict, _unused) -> None:
    import torch

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.platforms import current_platform
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    _ensure_distributed(vllm_config)
    _init_workspace(vllm_config)
    with set_current_vllm_config(vllm_config), _CudaToMeta():
        out["_stage"] = "layer_init"
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("meta"):
            model = initialize_model(vllm_config=vllm_config)
        draft_layers: set[str] = set()
        if vllm_config.speculative_config is not None:
            out["_stage"] = "draft_init"
            draft_layers = _build_drafter(vllm_config, model)
        out["_stage"] = "block_size"
        current_platform.update_block_size_for_backend(vllm_config)
        out["block_size"] = vllm_config.cache_config.block_size
        out["_stage"] = "kv_cache_spec"
        specs = get_kv_cache_spec(vllm_config)
        out["_stage"] = "kv_cache_groups"
        _resolve_layout(vllm_config, specs)
        kv_cfg = _kv_cache_config(vllm_config, specs)
        out["_stage"] = "metadata_builders"
        attn_groups, kernel_blocks, draft_blocks = _init_attn_backend(vllm_config, kv_cfg, draft_layers)
        out["_stage"] = "record"
        out["groups"] = _groups(vllm_config, kv_cfg, attn_groups, kernel_blocks, draft_layers, draft_blocks)
        out["block_size"] = vllm_config.cache_config.block_size


def _resolve_layout(vllm_config, specs) -> None:
    """The KV-cache layout every backend accepts (0.32.0 on). Earlier releases (0.28.0) set it at selection
    (get_attn_backend's required layout), which is already done here."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    except ImportError:
        return
    layouts = [[x.name for x in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))]]
    resolve_kv_cache_layout(vllm_config, layouts, specs.values())


def _init_attn_backend(vllm_config, kv_cfg, draft_layers):
    """The metadata builders as the V2 runner makes them: (attention groups, kernel blocks per KV group, the draft
    layers' kernel blocks per KV group or None). 0.32.0 on builds target and draft in one call (draft_layer_names);
    0.28.0's target runner builds every layer of a group (the draft's KV-sharing ones too), then its speculator
    builds the draft layers' own (set_attn: active_layer_names), whose kernel block the draft runs with."""
    import inspect

    from vllm.v1.worker.gpu.attn_utils import init_attn_backend

    if "draft_layer_names" in inspect.signature(init_attn_backend).parameters:
        groups, _, blocks = init_attn_backend(kv_cfg, vllm_config, BUILDER_DEVICE_T(), draft_layer_names=draft_layers)
        return groups, blocks, None
    groups, _, blocks = init_attn_backend(kv_cfg, vllm_config, BUILDER_DEVICE_T())
    if not draft_layers:
        return groups, blocks, None
    _, _, draft_blocks = init_attn_backend(kv_cfg, vllm_config, BUILDER_DEVICE_T(), active_layer_names=draft_layers)
    return groups, blocks, draft_blocks


def _kv_cache_config(vllm_config, specs):
    """The engine core's KV-cache planning. 0.33.0 split it into kv_cache_planning and forms the
    global groups first; 0.32.0 forms them inside get_kv_cache_configs (kv_cache_utils)."""
    try:
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    except ModuleNotFoundError:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

        return get_kv_cache_configs(vllm_config, [specs], [KV_MEMORY_BYTES])[0]
    groups = get_global_kv_cache_groups(vllm_config, [specs])
    return get_kv_cache_configs(vllm_config, [specs], [KV_MEMORY_BYTES], groups)[0]


def _build_drafter(vllm_config, target_model) -> set[str]:
    """Gemma4Speculator's own draft construction (V2 runner), its weights on the meta device."""
    import torch

    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.worker.gpu.spec_decode import gemma4 as _g  # noqa: F401
    from vllm.v1.worker.gpu.spec_decode.gemma4 import speculator as spec_mod

    before = set(get_layers_from_vllm_config(vllm_config, Attention))
    spec = spec_mod.Gemma4Speculator.__new__(spec_mod.Gemma4Speculator)
    spec.vllm_config = vllm_config
    spec.speculative_config = vllm_config.speculative_config

    def meta_get_model(*, vllm_config, model_config, load_config=None):
        with set_default_torch_dtype(model_config.dtype), torch.device("meta"):
            return initialize_model(vllm_config=vllm_config, model_config=model_config)

    real = spec_mod.get_model
    spec_mod.get_model = meta_get_model  # loading only: weights are not part of selection
    try:
        spec.load_draft_model(target_model, before)
    finally:
        spec_mod.get_model = real
    return set(get_layers_from_vllm_config(vllm_config, Attention)) - before


# vLLM's KV-cache spec classes -> the group kinds of records (design: /work/notes/design42.md). The
# first class of a spec's MRO named here decides: MLAAttentionSpec subclasses FullAttentionSpec but
# is `mla`; a spec class not named here (and none of its bases) is recorded under its own class name.
SPEC_KINDS = {"MLAAttentionSpec": "mla", "FullAttentionSpec": "full_attention", "SlidingWindowSpec": "sliding_window",
              "ChunkedLocalAttentionSpec": "chunked_local", "MambaSpec": "mamba"}
# MambaSpec.mamba_type (vLLM's MambaAttentionBackendEnum member) -> the record's mamba_type
MAMBA_TYPES = {"MAMBA1": "mamba1", "MAMBA2": "mamba2", "GDN_ATTN": "gdn", "LINEAR": "linear",
               "SHORT_CONV": "short_conv"}


def group_kind(spec) -> str:
    """The record's group kind for a vLLM KV-cache spec (or spec class). An MLA spec whose
    cache_role is `indexer` (DeepSeek-V3.2's sparse-attention indexer keeps its keys in a cache of
    its own, DeepseekV32IndexerCache) is `mla_indexer`, a group beside the `mla` group it selects for."""
    spec_cls = spec if isinstance(spec, type) else type(spec)
    for klass in spec_cls.__mro__:
        if klass.__name__ in SPEC_KINDS:
            kind = SPEC_KINDS[klass.__name__]
            if kind == "mla" and str(getattr(spec, "cache_role", "")) == "indexer":
                return "mla_indexer"
            return kind
    return spec_cls.__name__


def mamba_type(spec) -> str:
    t = getattr(spec, "mamba_type", None)
    name = getattr(t, "name", None) or str(t)
    return MAMBA_TYPES.get(name, name.lower())


def _groups(vllm_config, kv_cfg, attn_groups, kernel_blocks, draft_layers, draft_blocks=None) -> dict:
    """Per group kind (and draft/target): the backend, FA version, blocks, quant-query, impl, layers;
    for Mamba-like groups also vLLM's mamba_type and the state's page size. Every layer vLLM
    registered with a KV-cache spec is in one group (attention, MLA, Mamba, GDN, linear...)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    layers = get_layers_from_vllm_config(vllm_config, AttentionLayerBase)
    per: dict[str, dict] = {}
    for gid, groups in enumerate(attn_groups):
        kv_block = kv_cfg.kv_cache_groups[gid].kv_cache_spec.block_size
        for g in groups:
            kind = group_kind(g.kv_cache_spec)
            for name in g.layer_names:
                layer = layers[name]
                key = f"draft:{kind}" if name in draft_layers else kind
                kernel = draft_blocks[gid] if draft_blocks is not None and name in draft_layers else kernel_blocks[gid]
                rec = {"backend": layer.get_attn_backend().get_name(), "fa_version": _fa_version(layer),
                       "kernel_block": kernel, "kv_block": kv_block,
                       "quant_query": _quant_query(layer), "impl": _impl_name(layer)}
                if kind == "mla":
                    rec["sparse"] = bool(getattr(getattr(layer, "impl", None), "is_sparse", False))
                if kind == "mamba":
                    rec["mamba_type"] = mamba_type(g.kv_cache_spec)
                    rec["page_size_bytes"] = g.kv_cache_spec.page_size_bytes
                per.setdefault(key, {"layers": [], "values": []})
                per[key]["layers"].append(_layer_index(name))
                if rec not in per[key]["values"]:
                    per[key]["values"].append(rec)
    seen = {n for v in attn_groups for g in v for n in g.layer_names}
    specs = {n for grp in kv_cfg.kv_cache_groups for n in grp.layer_names}
    if specs - seen:  # a KV-cache group vLLM builds no attention group for: never dropped silently
        raise RuntimeError(f"kselect oracle: layers with a KV-cache spec but no attention group: {sorted(specs - seen)[:4]}")
    out = {}
    for key, v in per.items():
        vals = v["values"]
        g = dict(vals[0]) if len(vals) == 1 else {f: _uniform([x[f] for x in vals]) for f in vals[0]}
        g["layers"] = sorted(v["layers"])
        if len(vals) > 1:
            g["mixed"] = vals  # layers of one kind that vLLM runs differently
        out[key] = g
    return out


def _quant_query(layer) -> bool:
    """Attention: the layer quantizes its query (an FP8 KV cache the kernel reads with an FP8 query).
    MLA: the decode query is FP8 (a quantized KV cache and an impl that takes a quantized query, as
    MLAAttention.forward_impl decides). Mamba-like layers: never."""
    if hasattr(layer, "query_quant"):
        return layer.query_quant is not None
    impl = getattr(layer, "impl", None)
    dtype = getattr(layer, "kv_cache_dtype", None)
    if impl is None or dtype is None:
        return False
    from vllm.v1.kv_cache_interface import is_quantized_kv_cache

    return bool(is_quantized_kv_cache(dtype) and getattr(impl, "supports_quant_query_input", False))


def _impl_name(layer) -> str:
    impl = getattr(layer, "impl", None)
    return type(impl).__name__ if impl is not None else type(layer).__name__


def _uniform(values):
    return values[0] if all(v == values[0] for v in values) else "mixed"


def _fa_version(layer):
    impl = getattr(layer, "impl", None)
    v = getattr(impl, "vllm_flash_attn_version", None)
    if v is None and hasattr(impl, "get_impl_variants"):
        for sub in impl.get_impl_variants():
            v = v or getattr(sub, "vllm_flash_attn_version", None)
    return v


def _layer_index(name: str) -> int:
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return -1


def _init_workspace(vllm_config) -> None:
    """The worker's workspace manager (gpu_worker: before the model runner is made), on meta:
    FlashMLA-sparse's impl takes its buffers from it at construction."""
    from vllm.v1.worker.workspace import init_workspace_manager

    spec = vllm_config.speculative_config
    lanes = 2 if spec is not None and getattr(spec, "uses_separate_workspace_lane", False) else 1
    init_workspace_manager(BUILDER_DEVICE_T(), 2 if vllm_config.parallel_config.enable_dbo else 1, lanes)


def BUILDER_DEVICE_T():  # noqa: N802 - the builders' device as torch.device
    import torch

    return torch.device(BUILDER_DEVICE)


_DIST_READY = False
_DIST_MOE: bool | None = None  # whether the model-parallel groups were made for an MoE model (an EP group)


def _ensure_distributed(vllm_config) -> None:
    """One process, world size 1 (gloo). vLLM makes the expert-parallel group only for an MoE model:
    the model-parallel groups are made again when a cell's model is MoE and the last one's was not
    (or the other way round), as a fresh engine for that model makes them."""
    global _DIST_READY, _DIST_MOE
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (destroy_model_parallel, ensure_model_parallel_initialized,
                                                 init_distributed_environment)

    moe = bool(getattr(vllm_config.model_config, "is_moe", False))
    if _DIST_READY and _DIST_MOE == moe:
        return
    with set_current_vllm_config(vllm_config):
        if not _DIST_READY:
            fd, path = tempfile.mkstemp(prefix="kselect_vllm_dist_")
            os.close(fd)
            os.unlink(path)
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"file://{path}", backend="gloo")
        else:
            destroy_model_parallel()
        ensure_model_parallel_initialized(1, 1)
    _DIST_READY, _DIST_MOE = True, moe


class _CudaToMeta:
    """The chain on the meta device, also where a layer or builder names the CUDA device itself
    (`device="cuda"`, `current_platform.current_device()`, `torch.accelerator.current_device_index()`:
    DeepSeek-V3.2's top-k buffer and FlashMLA-sparse impl, GDN's gated norm): such tensors are made
    on meta too, device 0 is the current one. CPU tensors stay CPU."""

    def __enter__(self):
        import torch
        from torch.overrides import TorchFunctionMode

        def is_cuda(d) -> bool:
            if isinstance(d, torch.device):
                return d.type == "cuda"
            if isinstance(d, str):
                return d.split(":")[0] == "cuda"
            return isinstance(d, int) and not isinstance(d, bool)

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                if is_cuda(kwargs.get("device")):
                    kwargs["device"] = torch.device("meta")
                if func is torch.tensor and args and isinstance(args[0], (int, float)):
                    # a constant from a Python number (XIELU's alpha and beta): a layer reads it back at
                    # construction (.item()), which a meta tensor cannot give
                    kwargs["device"] = torch.device("cpu")
                if func in (torch.Tensor.to, torch.Tensor.cuda):
                    if func is torch.Tensor.cuda:
                        return args[0]
                    args = tuple(torch.device("meta") if is_cuda(a) and not isinstance(a, int) else a
                                 for a in args)
                return func(*args, **kwargs)

        self._saved = (torch.cuda.current_device, torch.accelerator.current_device_index,
                       torch.cuda.empty_cache, torch.accelerator.empty_cache)
        torch.cuda.current_device = torch.accelerator.current_device_index = lambda: 0
        torch.cuda.empty_cache = torch.accelerator.empty_cache = lambda: None  # nothing is allocated
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        import torch

        self._mode.__exit__(*exc)
        (torch.cuda.current_device, torch.accelerator.current_device_index,
         torch.cuda.empty_cache, torch.accelerator.empty_cache) = self._saved
        return False


_CACHES: tuple[int, list] = (0, [])


def _clear_caches() -> None:
    """functools caches keyed on config values (backend choice, FA support) must not leak
    from one cell into the next; the capability is fixed for the process."""
    global _CACHES
    layouts = sys.modules.get("vllm.v1.attention.backends.utils")
    if layouts is not None and hasattr(layouts, "_KV_CACHE_LAYOUT_OVERRIDE"):  # 0.28.0 sets it at selection: a fresh
        layouts._KV_CACHE_LAYOUT_OVERRIDE = None  # engine starts without one
    if _CACHES[0] != len(sys.modules):
        _CACHES = (len(sys.modules), _find_caches())
    for f in _CACHES[1]:
        f.cache_clear()


def _find_caches() -> list:
    import functools

    seen, found = set(), []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm") or not isinstance(mod, types.ModuleType):
            continue
        for obj in list(vars(mod).values()):
            for f in (obj, *(vars(obj).values() if isinstance(obj, type) else ())):
                if isinstance(f, (classmethod, staticmethod)):
                    f = f.__func__
                if isinstance(f, functools._lru_cache_wrapper) and id(f) not in seen:
                    seen.add(id(f))
                    found.append(f)
    return found


def _one_line(s: str) -> str:
    return " ".join(s.split())[:2000]


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if "/vllm/" in f.filename]
    f = (frames or tb or [None])[-1]
    if f is None:
        return ""
    return f"{f.filename.split('/vllm/', 1)[-1]}:{f.lineno} {f.name}"
