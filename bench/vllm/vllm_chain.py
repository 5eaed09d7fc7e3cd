"""Run vLLM's own attention selection for one oracle cell (imported by bench/vllm/oracle.py).

Runs in the vLLM venv (bench/vllm/setup.sh), one GPU capability per process: the capability is
the one thing mocked (`NonNvmlCudaPlatform.get_device_capability`). What is stubbed is what a
CPU machine lacks: vLLM's compiled extensions (empty modules, so FA2/FA3 count as built; the
real capability gates in vllm_flash_attn decide), FlashInfer and torchvision (bench/vllm/stubs/).
The model is built on the meta device from a config.json written from our preset (no weights).

The chain, as vLLM 0.33.0 runs it when an engine starts:
  EngineArgs -> create_engine_config (Gemma4Config.verify_and_update_config)
  model init: every Attention layer calls get_attn_backend (recorded: all candidates + reasons)
  and builds its impl (FA version, quant-query)
  [MTP] Gemma4Speculator.load_draft_model builds the draft layers on the target's KV
  Platform.update_block_size_for_backend -> get_kv_cache_spec (customize_attention_spec)
  -> resolve_kv_cache_layout -> get_global_kv_cache_groups -> get_kv_cache_configs
  -> init_attn_backend (prepare_kernel_block_sizes, select_common_block_size, metadata builders)
An exception is recorded with the stage it came from; nothing after it runs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import types
from pathlib import Path

STUBS = Path(__file__).resolve().parent / "stubs"
# metadata builders allocate their device buffers here (meta: shapes only, no memory)
BUILDER_DEVICE = "meta"
KV_MEMORY_BYTES = 100 * 2**30  # what the KV planner may use; selection does not depend on it
STAGES = ("engine_config", "selection", "layer_init", "draft_init", "block_size", "kv_cache_spec",
          "kv_cache_groups", "metadata_builders")


DEVICE_NAMES = {(8, 0): "NVIDIA A100-SXM4-80GB", (8, 9): "NVIDIA L40S", (9, 0): "NVIDIA H200",
                (10, 0): "NVIDIA B200", (12, 0): "NVIDIA GeForce RTX 5090"}
SM_COUNTS = {(8, 0): 108, (8, 9): 142, (9, 0): 132, (10, 0): 148, (12, 0): 170}
_CC: tuple[int, int] | None = None
_RECORDED: list[dict] = []


def boot(src: str, cc: tuple[int, int]) -> None:
    """Prepare this process for capability `cc`: env, stubs, the CUDA platform."""
    global _CC
    _CC = cc
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # HAS_TRITON stays on, no driver probed; V2 runner default
    os.environ["VLLM_HAS_FLASHINFER_CUBIN"] = "1"  # stands in for flashinfer-cubin
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path[:0] = [str(STUBS), src]
    # vLLM's own subprocesses (model inspection) see the same sources and stubs
    os.environ["KSELECT_VLLM_ORACLE"] = "1"
    os.environ["KSELECT_VLLM_SRC"] = src
    os.environ["PYTHONPATH"] = os.pathsep.join([str(STUBS), src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    import _kselect_vllm_ext  # noqa: F401

    import vllm.platforms as platforms
    from vllm.platforms import cuda
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
    # no pinned host memory without a CUDA driver: the backends' host buffers are plain
    import vllm.utils.torch_utils as torch_utils

    torch_utils.PIN_MEMORY = False
    # FlashInfer's impl allocates its multi-CTA KV counter on the CUDA device at layer init
    import torch
    import vllm.v1.attention.backends.flashinfer as fi_backend

    fi_backend._get_multi_ctas_kv_counter_buffer = lambda min_bytes, device: torch.empty(0, dtype=torch.uint8)
    # weight-reload bookkeeping walks every parameter of the model after construction: no
    # weights are ever loaded here, and it is most of a cell's time
    import vllm.model_executor.model_loader.utils as loader_utils

    loader_utils.record_metadata_for_reloading = lambda model: None
    _record_selection(cuda.CudaPlatformBase)


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


# ------------------------------------------------------------------------- model folders


def write_model_dirs(preset: dict, root: Path) -> tuple[Path, Path | None]:
    """config.json folders for the target (Gemma4ForConditionalGeneration) and its MTP drafter."""
    from kselect.gemma4.config import Gemma4Args
    from kselect.gemma4.drafter import DrafterArgs

    args = Gemma4Args.from_model_config(preset)
    text = args.to_hf_config_dict()
    dtype = text.pop("dtype")
    text.update(model_type="gemma4_text", use_bidirectional_attention="vision")
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": dtype,
           "text_config": text, "vision_config": {"model_type": "gemma4_vision"}, "tie_word_embeddings": True}
    target = root / preset["name"]
    _write_json(target / "config.json", cfg)
    drafter = None
    if preset.get("drafter"):
        d = DrafterArgs.from_preset(args, preset["drafter"]).to_hf_config_dict()
        drafter = root / f"{preset['name']}_assistant"
        _write_json(drafter / "config.json", d)
    return target, drafter


def _write_json(path: Path, obj) -> None:
    from kselect.selector.base.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1))


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
    return out


def _build(vllm_config, out: dict, _unused) -> None:
    import torch

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.platforms import current_platform
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec, init_attn_backend
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends

    _ensure_distributed(vllm_config)
    with set_current_vllm_config(vllm_config):
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
        layouts = [[x.name for x in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))]]
        resolve_kv_cache_layout(vllm_config, layouts, specs.values())
        groups = get_global_kv_cache_groups(vllm_config, [specs])
        kv_cfg = get_kv_cache_configs(vllm_config, [specs], [KV_MEMORY_BYTES], groups)[0]
        out["_stage"] = "metadata_builders"
        attn_groups, _, kernel_blocks = init_attn_backend(kv_cfg, vllm_config, BUILDER_DEVICE,
                                                          draft_layer_names=draft_layers)
        out["groups"] = _groups(vllm_config, kv_cfg, attn_groups, kernel_blocks, draft_layers)
        out["block_size"] = vllm_config.cache_config.block_size


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


def _groups(vllm_config, kv_cfg, attn_groups, kernel_blocks, draft_layers) -> dict:
    """Per layer kind (and draft/target): the backend, FA version, blocks, quant-query, layers."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention import Attention

    layers = get_layers_from_vllm_config(vllm_config, Attention)
    per: dict[str, dict] = {}
    for gid, groups in enumerate(attn_groups):
        kv_block = kv_cfg.kv_cache_groups[gid].kv_cache_spec.block_size
        for g in groups:
            for name in g.layer_names:
                layer = layers[name]
                kind = "sliding_window" if layer.sliding_window is not None else "full_attention"
                key = f"draft:{kind}" if name in draft_layers else kind
                rec = {"backend": layer.attn_backend.get_name(), "fa_version": _fa_version(layer.impl),
                       "kernel_block": kernel_blocks[gid], "kv_block": kv_block,
                       "quant_query": layer.query_quant is not None,
                       "impl": type(layer.impl).__name__}
                per.setdefault(key, {"layers": [], "values": []})
                per[key]["layers"].append(_layer_index(name))
                if rec not in per[key]["values"]:
                    per[key]["values"].append(rec)
    out = {}
    for key, v in per.items():
        vals = v["values"]
        g = dict(vals[0]) if len(vals) == 1 else {f: _uniform([x[f] for x in vals]) for f in vals[0]}
        g["layers"] = sorted(v["layers"])
        if len(vals) > 1:
            g["mixed"] = vals  # layers of one kind that vLLM runs differently
        out[key] = g
    return out


def _uniform(values):
    return values[0] if all(v == values[0] for v in values) else "mixed"


def _fa_version(impl):
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


_DIST_READY = False


def _ensure_distributed(vllm_config) -> None:
    global _DIST_READY
    if _DIST_READY:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment

    fd, path = tempfile.mkstemp(prefix="kselect_vllm_dist_")
    os.close(fd)
    os.unlink(path)
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"file://{path}", backend="gloo")
        ensure_model_parallel_initialized(1, 1)
    _DIST_READY = True


_CACHES: tuple[int, list] = (0, [])


def _clear_caches() -> None:
    """functools caches keyed on config values (backend choice, FA support) must not leak
    from one cell into the next; the capability is fixed for the process."""
    global _CACHES
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
