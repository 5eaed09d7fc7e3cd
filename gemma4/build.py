"""Building blocks of a Gemma-4 run: compose and resolve the selection, build or load the model (and MTP
drafters), encode prompts. Used by `kselect run` (kselect/run.py) and the measurement drivers
(kselect/measurement/gemma4/)."""

from __future__ import annotations

import torch

DEFAULT_PROMPTS = [
    "The quick brown fox",
    "Attention lets every token look at",
    "Once upon a time there was a little robot who wanted to",
    "1 2 3 4 5",
]
# Calibration text for `kv_cache.scales=calibrated` (not the prompts being measured).
CALIBRATION_TEXT = [
    "The weather today is sunny with a light breeze from the west, and the temperature is mild.",
    "Selecting the right attention kernel for each layer group depends on the head size and the window.",
    "def main(): print('hello, world')  # a tiny program",
]
RANDOM_WEIGHTS_MAX_PARAMS = {"cpu": 2e8, "cuda": 4e10}


class RunError(Exception):
    """A user-facing failure of the main job (printed as one paragraph, exit status 2)."""


def select(overrides: list[str]):
    from ..selector.api import compose, resolve  # the lead's validated config and resolver

    cfg = compose(overrides)
    return cfg, resolve(cfg)


def build_model(cfg, seed: int):
    """(model, tokenizer, source description) for cfg.model on cfg.platform.device."""
    from .checkpoint import build_random, load_checkpoint, load_tokenizer
    from .config import Gemma4Args
    from .model import Gemma4

    device = torch.device(cfg.platform.device if cfg.platform.device != "rocm" else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(f"platform {cfg.platform.name} needs CUDA, which this machine does not have (use platform=cpu)")
    if device.type not in ("cpu", "cuda"):
        raise RunError(f"device {device.type!r} is not supported by the gemma4 runner")
    md = cfg.model.model_dump()
    args = Gemma4Args.from_model_config(md)
    if cfg.model.checkpoint:
        model = load_checkpoint(cfg.model.checkpoint, device=device, dtype=args.torch_dtype)
        _check_matches_preset(model.args, args, cfg.model.name)
        return model, load_tokenizer(cfg.model.checkpoint), f"checkpoint {cfg.model.checkpoint}"
    with torch.device("meta"):
        n = sum(p.numel() for p in Gemma4(args).parameters())
    if n > RANDOM_WEIGHTS_MAX_PARAMS[device.type]:
        raise RunError(
            f"model {cfg.model.name} has {n / 1e9:.1f}B parameters: random weights are only built for small "
            f"models on {device.type}; set model.checkpoint=<HF folder> or use model=gemma4_tiny")
    model = build_random(args, seed=seed, device=device)
    return model, load_tokenizer(), f"seeded random weights (seed {seed}, {n / 1e6:.2f}M parameters)"


def build_drafters(cfg, target, *, checkpoint: str | None = None, seed: int = 0, inits=("random", "copy")):
    """[(label, Drafter)]: an HF assistant checkpoint, else seeded drafters with the preset's
    `drafter:` shapes: `random` weights, and the `copy` heuristic init (`copy_init`)."""
    from .checkpoint import load_drafter
    from .config import DrafterArgs
    from .drafter_init import build_random_drafter

    if checkpoint:
        return [(f"checkpoint {checkpoint}", load_drafter(checkpoint, target.args, device=target.device,
                                                          dtype=target.dtype))]
    dargs = DrafterArgs.from_preset(target.args, cfg.model.drafter)
    out = []
    for init in inits:
        copy_from = target.embed_tokens.weight if init == "copy" else None
        d = build_random_drafter(dargs, seed=seed, device=target.device, dtype=target.dtype, copy_from=copy_from)
        out.append((f"seeded {init} (seed {seed})", d))
    return out


def _check_matches_preset(ck, preset, name: str) -> None:
    """The selection was resolved from the preset's shapes: the checkpoint must have the same ones."""
    keys = ("num_hidden_layers", "layer_types", "head_dim", "global_head_dim", "num_key_value_heads",
            "num_attention_heads", "sliding_window", "num_kv_shared_layers", "attention_k_eq_v")
    diff = [k for k in keys if getattr(ck, k) != getattr(preset, k)]
    if [ck.num_kv_heads(i) for i in range(ck.num_hidden_layers)] != [
            preset.num_kv_heads(i) for i in range(preset.num_hidden_layers)]:
        diff.append("num_global_key_value_heads")
    if diff:
        raise RunError(
            f"checkpoint config does not match model={name}, whose shapes the selection was resolved for: "
            + "; ".join(f"{k}: preset {getattr(preset, k, '?')!r}, checkpoint {getattr(ck, k, '?')!r}" for k in diff))


def encode(tok, texts: list[str], bos: int) -> list[list[int]]:
    return [[bos] + tok.encode(t).ids for t in texts]
