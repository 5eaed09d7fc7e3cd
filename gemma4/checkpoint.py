"""Checkpoints: Hugging Face folders (config.json + safetensors shards), seeded random weights, tokenizers; and
the MTP drafter's (HF `Gemma4AssistantForCausalLM` folders, read by the same safetensors reader).

Only safetensors are read (never pickle). Tensor names are HF's: `model.` (Gemma4ForCausalLM) or
`model.language_model.` (Gemma4ForConditionalGeneration) prefixes are stripped; vision/audio
towers are skipped; `lm_head.weight` is tied to the embedding. Every missing, unexpected or
wrong-shape tensor and every unreadable file raises `CheckpointError` naming it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ..kernels.dtypes import dtype_name
from .config import DrafterArgs, DrafterError, Gemma4Args, torch_dtype
from .drafter import Drafter
from .model import Gemma4

ASSETS = Path(__file__).resolve().parent / "assets"
BUNDLED_TOKENIZER = ASSETS / "tokenizer.json"

# Prefixes HF writes, longest first; and multimodal parts a text decoder does not use.
_PREFIXES = ("model.language_model.", "language_model.model.", "model.", "")
_SKIP_PREFIXES = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.",
                  "vision_tower.", "audio_tower.", "multi_modal_projector.")
_SHARED_KV_PARTS = ("k_proj", "v_proj", "k_norm", "v_norm")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as the model it claims to be."""


# ---------------------------------------------------------------------------- random weights


def _init_kind(name: str) -> str:
    """How a parameter is initialised: qk_norm, scale (norms, scalars), embedding or linear."""
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return "qk_norm"
    if "norm" in name or name.rsplit(".", 1)[-1] in ("layer_scalar", "scale", "per_expert_scale"):
        return "scale"
    return "embedding" if "embed_tokens" in name else "linear"


def init_weights(model: Gemma4, seed: int = 0, embed_std: float = 0.1) -> Gemma4:
    """Deterministic weights from `seed` (independent of device and module order).

    Linear/expert weights ~ N(0, fan_in^-1), embeddings ~ N(0, embed_std^2); RMSNorm weights, router
    scales and per-layer scalars ~ 1 + N(0, 0.1^2), so a `(1 + w)` norm or a dropped scalar shows.
    q_norm/k_norm weights are further scaled by head_dim^-1/4: with softmax scale 1.0, unit q/k
    norms would give attention logits ~ N(0, head_dim), a near-argmax attention that turns tiny
    (e.g. FP8) perturbations into different outputs; trained Gemma-4 norms are not like that.
    """
    gen = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    with torch.no_grad():
        for name in sorted(state):
            t = state[name]
            kind = _init_kind(name)
            if kind in ("scale", "qk_norm"):
                v = 1.0 + 0.1 * torch.randn(t.shape, generator=gen)
                if kind == "qk_norm":
                    v = v * t.shape[0] ** -0.25
            elif kind == "embedding":
                v = embed_std * torch.randn(t.shape, generator=gen)
            else:
                fan_in = t.shape[-1]
                v = torch.randn(t.shape, generator=gen) / math.sqrt(fan_in)
            t.copy_(v.to(t.dtype))
    return model


def init_weights_inplace(model: Gemma4, seed: int = 0, embed_std: float = 0.1) -> Gemma4:
    """`init_weights`' distributions drawn in place, in the parameters' own dtype and device, from a
    generator on that device (no fp32 or host copy: what a 61 GB bf16 31B on a GPU needs). Seeded
    and deterministic, but not the same numbers as `init_weights` (another generator)."""
    dev = model.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    state = model.state_dict()
    with torch.no_grad():
        for name in sorted(state):
            t = state[name]
            kind = _init_kind(name)
            if kind in ("scale", "qk_norm"):
                t.normal_(1.0, 0.1, generator=gen)
                if kind == "qk_norm":
                    t.mul_(t.shape[0] ** -0.25)
            elif kind == "embedding":
                t.normal_(0.0, embed_std, generator=gen)
            else:
                t.normal_(0.0, t.shape[-1] ** -0.5, generator=gen)
    return model


def build_random(args: Gemma4Args, seed: int = 0, device="cpu", dtype: torch.dtype | None = None,
                 embed_std: float = 0.1) -> Gemma4:
    """Seeded random weights. CPU: built in fp32 with a CPU generator, then cast (the numbers the
    tests pin). Other devices: built directly on the device in the model dtype and initialised in
    place with a generator on that device (no host RAM, no fp32 copy)."""
    device = torch.device(device)
    dtype = dtype or args.torch_dtype
    if device.type == "cpu":
        model = init_weights(Gemma4(args), seed, embed_std)
        return model.to(device=device, dtype=dtype).eval().keep_rope_fp32()
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Gemma4(args)
    finally:
        torch.set_default_dtype(prev)
    return init_weights_inplace(model, seed, embed_std).eval().keep_rope_fp32()


# ---------------------------------------------------------------------------- HF folders


def hf_config_json(args: Gemma4Args) -> dict:
    d = args.to_hf_config_dict()
    d.update(model_type="gemma4_text", architectures=["Gemma4ForCausalLM"], dtype=args.dtype)
    return d


def save_checkpoint(model: Gemma4, folder: str | Path, *, tokenizer: str | Path | None = None,
                    shard_bytes: int | None = None) -> Path:
    """Write an HF-style folder: config.json + model.safetensors (or shards with an index)."""
    from safetensors.torch import save_file

    from ..selector.base.files import atomic_write, replaced

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "config.json", json.dumps(hf_config_json(model.args), indent=2))
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if not shard_bytes:
        with replaced(folder / "model.safetensors") as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
    else:
        shards: list[dict] = [{}]
        size = 0
        for k in sorted(tensors):
            n = tensors[k].numel() * tensors[k].element_size()
            if shards[-1] and size + n > shard_bytes:
                shards.append({})
                size = 0
            shards[-1][k] = tensors[k]
            size += n
        weight_map = {}
        for i, sh in enumerate(shards):
            fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            with replaced(folder / fn) as tmp:
                save_file(sh, str(tmp), metadata={"format": "pt"})
            weight_map |= {k: fn for k in sh}
        atomic_write(folder / "model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": weight_map}))
    if tokenizer is not None:
        atomic_write(folder / "tokenizer.json", Path(tokenizer).read_bytes())
    return folder


def read_config_json(folder: str | Path, error: type[Exception], expected: str) -> tuple[Path, dict]:
    """(path, parsed config.json) of a checkpoint folder, or `error` saying what is wrong."""
    folder = Path(folder)
    cfg = folder / "config.json"
    if not cfg.is_file():
        raise error(f"{folder}: no config.json (expected {expected})")
    if cfg.stat().st_size > 16 << 20:
        raise error(f"{cfg}: {cfg.stat().st_size} bytes; allowed: a config.json of at most 16 MiB")
    try:
        d = json.loads(cfg.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise error(f"{cfg}: not valid JSON ({e.__class__.__name__}: {str(e)[:200]})") from e
    except OSError as e:
        raise error(f"{cfg}: unreadable ({e})") from e
    if not isinstance(d, dict):
        raise error(f"{cfg}: a JSON {type(d).__name__}; expected an object (expected {expected})")
    return cfg, d


def read_config(folder: str | Path) -> Gemma4Args:
    cfg, d = read_config_json(folder, CheckpointError, "a Hugging Face checkpoint folder")
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else d
    precheck(text, str(cfg))
    try:
        args = Gemma4Args.from_hf_config(d)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, ZeroDivisionError) as e:
        raise CheckpointError(f"{cfg}: not a usable Gemma-4 text config: {type(e).__name__}: {e}") from e
    check_bounds(args, str(cfg))
    return args


def precheck(d: dict, where: str) -> None:
    """The raw config.json values the selector's schema bounds (sizes, counts), before anything
    is derived from them (a layer list of num_hidden_layers entries is built on construction)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from ..selector.config.schema import ModelConfig

    for k, f in ModelConfig.model_fields.items():
        if k in d and d[k] is not None and k not in ("name", "architecture", "dtype", "checkpoint", "drafter"):
            try:
                TypeAdapter(Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation).validate_python(d[k])
            except ValidationError as e:
                err = e.errors(include_url=False)[0]
                raise CheckpointError(f"{where}: {k}: {err['msg']} (got {str(d[k])[:60]!r})") from None


def check_bounds(args: Gemma4Args, where: str) -> None:
    """Every size of a config within the selector's bounds (selector/config/schema.py ModelConfig), before
    any tensor is allocated from it."""
    from pydantic import ValidationError

    from ..selector.base.errors import format_validation_error
    from ..selector.config.schema import ModelConfig

    keys = set(ModelConfig.model_fields) - {"name", "architecture", "dtype", "multimodal", "checkpoint", "drafter",
                                            "full_attention_every"}
    data = {k: getattr(args, k) for k in keys if hasattr(args, k)}
    try:
        ModelConfig.model_validate(dict(data, name="checkpoint", architecture="gemma4", dtype=args.dtype))
    except ValidationError as e:
        msg = format_validation_error(e).removeprefix("invalid config: ").replace("model.", "")
        raise CheckpointError(f"{where}: {msg}") from None


def check_size(args: Gemma4Args, folder: Path, files: list[Path]) -> None:
    """A config that describes a far larger model than the checkpoint's tensors is refused before
    the model is built (a few bytes of config.json must not allocate gigabytes)."""
    from safetensors import SafetensorError, safe_open

    have = 0
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                for k in fh.keys():
                    have += math.prod(fh.get_slice(k).get_shape())
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{f}: corrupted or unreadable safetensors file ({e})") from e
    # a lower bound of the parameters: the embedding and the dense MLPs
    want = args.vocab_size * args.hidden_size + args.num_hidden_layers * 3 * args.hidden_size * args.intermediate_size
    if want > 2 * have + (1 << 20):
        raise CheckpointError(
            f"{folder}/config.json describes at least {want:,} parameters but the safetensors files hold {have:,}; "
            "allowed: a config.json that matches its checkpoint"
        )


def _shard_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{index}: corrupted index ({type(e).__name__}: {e})") from e
        files = [folder / f for f in sorted(set(wm.values()))]
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{index} lists shard {f.name}, which is missing")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
        extra = f" (found {pickles}: pickle checkpoints are not loaded, convert them to safetensors)" if pickles else ""
        raise CheckpointError(f"{folder}: no .safetensors files{extra}")
    return files


def _canonical(name: str) -> str | None:
    """HF tensor name -> our state-dict name; None for tensors a text decoder ignores."""
    if name.startswith(_SKIP_PREFIXES):
        return None
    if name == "lm_head.weight":
        return name
    for p in _PREFIXES:
        if p and name.startswith(p):
            return name[len(p):]
    return name


def read_tensors(folder: str | Path) -> dict[str, tuple[str, torch.Tensor]]:
    """{our name: (checkpoint name, tensor)} from every shard. Raises CheckpointError on bad files."""
    return read_safetensors(_shard_files(Path(folder)), _canonical, CheckpointError)


def read_safetensors(files, rename, error: type[Exception]) -> dict[str, tuple[str, torch.Tensor]]:
    """{rename(name): (name, tensor)} over safetensors files (names mapped to None are skipped);
    a corrupted file or tensor, or a name present twice, raises `error` naming it."""
    from safetensors import SafetensorError, safe_open

    out: dict[str, tuple[str, torch.Tensor]] = {}
    for f in files:
        try:
            handle = safe_open(str(f), framework="pt", device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise error(f"{f}: corrupted or unreadable safetensors file ({e})") from e
        with handle:
            for key in handle.keys():
                ours = rename(key)
                if ours is None:
                    continue
                try:
                    t = handle.get_tensor(key)
                except (SafetensorError, OSError, ValueError, RuntimeError) as e:
                    raise error(f"{f}: tensor {key!r} is corrupted or unreadable ({e})") from e
                if ours in out:
                    raise error(f"{f}: tensor {key!r} appears twice (also as {out[ours][0]!r})")
                out[ours] = (key, t)
    return out


def load_state(model: Gemma4, tensors: dict[str, tuple[str, torch.Tensor]], where: str = "checkpoint") -> None:
    """Copy checkpoint tensors into `model` with strict name and shape checks."""
    args = model.args
    expected = model.state_dict()
    shared = {f"layers.{i}.self_attn.{p}" for i in range(args.num_hidden_layers) if args.is_kv_shared(i)
              for p in _SHARED_KV_PARTS}
    unexpected = []
    for ours, (orig, t) in tensors.items():
        if ours == "lm_head.weight":  # tied to the embedding
            want = tuple(expected["embed_tokens.weight"].shape)
            if tuple(t.shape) != want:
                raise CheckpointError(f"{where}: tensor {orig!r} has shape {tuple(t.shape)}, expected {want}")
            continue
        if ours not in expected:
            if ours.rsplit(".", 1)[0] in shared:  # KV-shared layers have no k/v weights (HF ignores them)
                continue
            unexpected.append(orig)
            continue
        want = tuple(expected[ours].shape)
        if tuple(t.shape) != want:
            raise CheckpointError(
                f"{where}: tensor {orig!r} has shape {tuple(t.shape)}, the model expects {want}")
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{where}: unexpected tensor {unexpected[0]!r}{more}: not part of this Gemma-4 config")
    missing = [k for k in expected if k not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more: {missing[1:4]})" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: missing tensor 'model.{missing[0]}'{more}")
    with torch.no_grad():
        for k, dst in expected.items():
            src = tensors[k][1]
            if not (src.is_floating_point() or src.dtype == dst.dtype):
                raise CheckpointError(f"{where}: tensor {tensors[k][0]!r} has dtype {src.dtype}, expected floating point")
            dst.copy_(src.to(dst.dtype))


def load_checkpoint(folder: str | Path, device="cpu", dtype: torch.dtype | None = None) -> Gemma4:
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    args = read_config(folder)
    check_size(args, folder, _shard_files(folder))
    if dtype is not None:
        args.dtype = dtype_name(torch_dtype(dtype))
    model = Gemma4(args)
    load_state(model, read_tensors(folder), where=str(folder))
    return model.to(device=device, dtype=args.torch_dtype).eval().keep_rope_fp32()


# ---------------------------------------------------------------------------- MTP drafters (HF assistants)


_IGNORED = ("model.embed_tokens.weight",)  # the draft-width embedding: unused (tied to lm_head)


def hf_state_dict(drafter: Drafter) -> dict[str, torch.Tensor]:
    """Our weights under HF's names (for `Gemma4AssistantForCausalLM.load_state_dict`)."""
    sd = {k: v for k, v in drafter.state_dict().items()}
    sd["model.embed_tokens.weight"] = sd["lm_head.weight"]
    return sd


def save_drafter(drafter: Drafter, folder: str | Path) -> Path:
    """An HF-style assistant folder: config.json + model.safetensors (lm_head tied into embed_tokens)."""
    from safetensors.torch import save_file

    from ..selector.base.files import atomic_write, replaced

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "config.json", json.dumps(drafter.args.to_hf_config_dict(), indent=2))
    sd = {k: v.detach().contiguous().cpu() for k, v in drafter.state_dict().items() if k != "lm_head.weight"}
    sd["model.embed_tokens.weight"] = drafter.lm_head.weight.detach().contiguous().cpu()
    with replaced(folder / "model.safetensors") as tmp:
        save_file(sd, str(tmp), metadata={"format": "pt"})
    return folder


def read_drafter_config(folder: str | Path, target: Gemma4Args) -> DrafterArgs:
    """The assistant folder's config.json as DrafterArgs for `target` (no tensors read): DrafterError if the
    folder is missing, has no or a malformed config.json, or one that does not fit the target."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DrafterError(f"{folder}: not a folder (expected a Gemma-4 assistant checkpoint folder)")
    cfg, d = read_config_json(folder, DrafterError, "a Gemma-4 assistant checkpoint folder")
    try:  # sizes within the selector's bounds before anything is derived or allocated from them
        precheck(d.get("text_config") if isinstance(d.get("text_config"), dict) else d, str(cfg))
    except CheckpointError as e:
        raise DrafterError(str(e)) from None
    try:
        return DrafterArgs.from_hf_config(d, target)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise DrafterError(f"{cfg}: not a usable gemma4_assistant config: {type(e).__name__}: {e}") from e


def load_drafter(folder: str | Path, target: Gemma4Args, device="cpu", dtype: torch.dtype | None = None) -> Drafter:
    """Load an HF `Gemma4AssistantForCausalLM` folder (safetensors only) for `target`.

    Raises DrafterError naming the missing, unexpected, wrong-shape or unreadable tensor, or the
    config field that does not fit the target."""
    folder = Path(folder)
    args = read_drafter_config(folder, target)
    if dtype is not None:
        args.dtype = dtype_name(dtype)
    drafter = Drafter(args)
    try:
        files = _shard_files(folder)
    except CheckpointError as e:
        raise DrafterError(str(e)) from e
    tensors = read_safetensors(files, lambda name: name, DrafterError)
    load_drafter_state(drafter, tensors, where=str(folder))
    return drafter.to(device=device, dtype=args.torch_dtype).eval().keep_rope_fp32()


def load_drafter_state(drafter: Drafter, tensors: dict[str, tuple[str, torch.Tensor]] | dict[str, torch.Tensor],
                       where: str = "drafter checkpoint") -> None:
    """Copy HF-named tensors into `drafter` with strict name and shape checks."""
    tensors = {k: (v if isinstance(v, tuple) else (k, v)) for k, v in tensors.items()}
    tensors = dict(tensors)
    if "lm_head.weight" not in tensors:  # tied: HF saves only model.embed_tokens.weight
        if "model.embed_tokens.weight" not in tensors:
            raise DrafterError(f"{where}: missing tensor 'lm_head.weight' (and no tied 'model.embed_tokens.weight')")
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    expected = drafter.state_dict()
    unexpected = [k for k in tensors if k not in expected and k not in _IGNORED]
    if unexpected:
        hint = ""
        if any(".k_proj." in k or ".v_proj." in k for k in unexpected):
            hint = " (k/v projections: the assistant's layers are Q-only; is this a target checkpoint?)"
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise DrafterError(f"{where}: unexpected tensor {unexpected[0]!r}{more}{hint}")
    missing = [k for k in expected if k not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more: {missing[1:4]})" if len(missing) > 1 else ""
        raise DrafterError(f"{where}: missing tensor {missing[0]!r}{more}")
    for k, dst in expected.items():
        orig, src = tensors[k]
        if tuple(src.shape) != tuple(dst.shape):
            raise DrafterError(f"{where}: tensor {orig!r} has shape {tuple(src.shape)}, the drafter expects "
                               f"{tuple(dst.shape)}")
        if k.endswith("token_ordering"):
            if src.is_floating_point():
                raise DrafterError(f"{where}: tensor {orig!r} must be integer token ids, got {src.dtype}")
            if not torch.equal(torch.sort(src.long()).values, torch.arange(src.numel())):
                raise DrafterError(f"{where}: tensor {orig!r} is not a permutation of the vocabulary")
        elif not src.is_floating_point():
            raise DrafterError(f"{where}: tensor {orig!r} has dtype {src.dtype}, expected floating point")
    emb = tensors.get("model.embed_tokens.weight")
    if emb is not None and tuple(emb[1].shape) != tuple(expected["lm_head.weight"].shape):
        raise DrafterError(f"{where}: tensor 'model.embed_tokens.weight' has shape {tuple(emb[1].shape)}, expected "
                           f"{tuple(expected['lm_head.weight'].shape)} (the draft-width tied head)")
    with torch.no_grad():
        for k, dst in expected.items():
            dst.copy_(tensors[k][1].to(dst.dtype))


# ---------------------------------------------------------------------------- tokenizers


def load_tokenizer(folder: str | Path | None = None):
    """The checkpoint folder's tokenizer.json, else the bundled byte-level tokenizer."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json" if folder is not None else BUNDLED_TOKENIZER
    if folder is not None and not path.is_file():
        raise CheckpointError(f"{folder}: no tokenizer.json")
    if not path.is_file():
        from .tokenizer import build_tokenizer

        return build_tokenizer()
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises plain Exception: one line
        first = (str(e).strip().splitlines() or [e.__class__.__name__])[0][:300]
        raise CheckpointError(f"{path}: not a usable tokenizer.json ({first})") from e
