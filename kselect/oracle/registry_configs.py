"""The registry grid's models: one config.json per text-generation architecture of a vLLM release's registry
(`vllm/model_executor/models/registry.py` `_TEXT_GENERATION_MODELS`) whose config class ships with transformers.

    <venv>/bin/python kselect/oracle/registry_configs.py --src SRC > configs.json

    <venv>/bin/python kselect/oracle/registry_configs.py --src SRC --wrappers kselect/oracle/wrapper_configs.json

With --wrappers: the multimodal wrappers of registry decoders kselect models (WRAPPERS, from `_MULTIMODAL_MODELS`)
instead, each from its config class's defaults (the text config shrunk as below) and, beside them, the
published-shaped configs of the JSON file as they are.

Runs in the release's own venv (standard library and transformers only; the registry is read as text; no kselect module).
For each architecture: transformers' model-type mapping names the config class (an architecture no mapping
names needs remote code: listed, no config); the class's defaults are shrunk to a few layers where the layer
pattern survives (lists and pattern strings cut to the new count, re-made where the class derives them), with
`architectures` and a bfloat16 dtype set. The answer: {"version", "transformers", "configs": {arch: config},
"remote_code": [arch], "config_errors": {arch: error}}.
"""

from __future__ import annotations

import argparse
import json
import sys

# fields vLLM 0.34.0's model class reads that the transformers class's defaults leave unset (None or absent):
# the values of the architecture's published checkpoints, so that vLLM can build the model at all
LFM2_TYPES = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv"]
FIXES = {
    "AfmoeForCausalLM": {"score_func": "sigmoid", "route_norm": True, "route_scale": 1.0, "n_group": 1,
                         "topk_group": 1},  # afmoe.py's router
    "DbrxForCausalLM": {"attn_config": {"rope_theta": 500000}},  # dbrx.py reads attn_config.rope_theta
    "DeepseekV2ForCausalLM": {"n_group": 1, "topk_group": 1},  # deepseek_v2.py: grouped top-k needs both
    "NemotronForCausalLM": {"num_key_value_heads": 8},
    "LongcatFlashForCausalLM": {"mla_scale_q_lora": True, "mla_scale_kv_lora": True, "zero_expert_type": "identity",
                                "intermediate_size": 12288, "moe_intermediate_size": 2048},  # longcat_flash.py
    "MiniMaxM2ForCausalLM": {"rotary_dim": 64, "scoring_func": "sigmoid"},  # minimax_m2.py: partial RoPE, router  # nemotron.py: the published Nemotron-4 KV heads
    "Glm4MoeForCausalLM": {"head_dim": 128},  # glm4_moe.py reads config.head_dim
    "Glm4MoeLiteForCausalLM": {"first_k_dense_replace": 1},  # glm4_moe_lite.py
    "HYV3ForCausalLM": {"first_k_dense_replace": 1, "expert_hidden_dim": 1536, "route_norm": True},  # hy_v3.py
    "InklingForCausalLM": {"padded_vocab_size": 201088},  # vllm/models/inkling: the published vocabulary
    # lfm2.py reads the LFM2 checkpoints' block_* and conv_dim; the class's default has no conv layer, the
    # published 1.2B model has attention at every third layer or so
    "Lfm2ForCausalLM": {"block_dim": 2560, "block_auto_adjust_ff_dim": True, "norm_eps": 1e-5, "conv_dim": 2560,
                        "layer_types": LFM2_TYPES, "full_attn_idxs": [2, 5]},
    "Lfm2MoeForCausalLM": {"layer_types": LFM2_TYPES},
    # the class's default is all Mamba (no attention layer); granite-4.0-h places attention among them
    "GraniteMoeHybridForCausalLM": {"layer_types": ["linear_attention"] * 3 + ["full_attention"]
                                    + ["linear_attention"] * 3 + ["full_attention"]},
}
# the config class a text-only checkpoint of the architecture names (the model-type mapping names the wrapper's)
MODEL_TYPE = {"Llama4ForCausalLM": "llama4_text"}
# multimodal wrappers whose language model is a registry decoder (vllm/model_executor/models/registry.py
# `_MULTIMODAL_MODELS`; conf/architectures/vllm_0_34_0.yaml `wraps:`)
WRAPPERS = ("Gemma3ForConditionalGeneration", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
            "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
            "LlavaNextVideoForConditionalGeneration", "LlavaOnevisionForConditionalGeneration",
            "Mistral3ForConditionalGeneration")
# not among them: Gemma3nForConditionalGeneration, whose vision tower (transformers' TimmWrapperModel, built also
# under --language-model-only) needs timm, which the oracle's venv lacks: vLLM's class does not build here
SHRUNK_LAYERS = 8  # keeps a 6-periodic (Gemma-3), 4-periodic (Cohere2, Qwen3-Next) or 8/4 (Jamba) pattern
PATTERN_STRINGS = ("hybrid_override_pattern",)


def registry_architectures(src: str) -> list[str]:
    """The keys of the registry's `_TEXT_GENERATION_MODELS`, read as a literal (importing the registry is not needed)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(src) / "vllm/model_executor/models/registry.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_TEXT_GENERATION_MODELS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit("no _TEXT_GENERATION_MODELS in the release's registry.py")


def _model_types() -> dict[str, str]:
    """architecture class name -> transformers model_type, from every model mapping transformers ships."""
    from transformers.models.auto import modeling_auto

    out: dict[str, str] = {}
    for name in sorted(vars(modeling_auto)):
        table = getattr(modeling_auto, name)
        if not (name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(table, dict)):
            continue
        for model_type, classes in table.items():
            for cls in classes if isinstance(classes, (tuple, list)) else (classes,):
                out.setdefault(cls, model_type)
    return out


def _layers_key(d: dict) -> tuple[dict, str] | None:
    """(the dict holding num_hidden_layers, key path) of a config dict: top level or text_config."""
    if isinstance(d.get("num_hidden_layers"), int):
        return d, ""
    t = d.get("text_config")
    if isinstance(t, dict) and isinstance(t.get("num_hidden_layers"), int):
        return t, "text_config"
    return None


def _cut(d: dict, n: int, k: int) -> dict:
    """Per-layer lists and pattern strings of length n cut to k."""
    out = dict(d)
    for key, v in d.items():
        if isinstance(v, list) and len(v) == n:
            out[key] = v[:k]
        elif key in PATTERN_STRINGS and isinstance(v, str) and len(v) == n:
            out[key] = v[:k]
    out["num_hidden_layers"] = k
    return out


def shrunk(cls, arch: str) -> dict:
    """The config class's defaults with at most SHRUNK_LAYERS layers (all of them where cutting fails)."""
    full = cls().to_dict()
    found = _layers_key(full)
    d = full
    if found is not None and found[0]["num_hidden_layers"] > SHRUNK_LAYERS:
        inner, where = found
        n = inner["num_hidden_layers"]
        cut = _cut(inner, n, SHRUNK_LAYERS)
        try:
            d = cls(**({**full, where: cut} if where else cut)).to_dict()
        except Exception:  # noqa: BLE001 - a class that cannot be cut keeps its full depth
            d = full
    for key, v in FIXES.get(arch, {}).items():
        d[key] = {**d.get(key, {}), **v} if isinstance(v, dict) else v
    d["architectures"] = [arch]
    for inner in (d, d.get("text_config")):  # the dtype vLLM's --dtype auto reads, where either side looks
        if isinstance(inner, dict):
            inner["dtype"] = "bfloat16"
            inner.pop("torch_dtype", None)
    return json.loads(json.dumps(d, default=str))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="the release's Python sources (a folder holding vllm/)")
    p.add_argument("--wrappers", default=None, help="the multimodal wrappers instead, with this JSON's published-shaped "
                                                    "configs ({name: config.json})")
    a = p.parse_args(argv)
    import transformers
    from transformers import CONFIG_MAPPING

    types = _model_types()
    out = {"transformers": transformers.__version__, "configs": {}, "remote_code": [], "config_errors": {}}
    if a.wrappers:
        from pathlib import Path

        published = json.loads(Path(a.wrappers).read_text())
        out["configs"].update({k: v for k, v in published.items() if not k.startswith("_")})
    for arch in WRAPPERS if a.wrappers else registry_architectures(a.src):
        mt = MODEL_TYPE.get(arch, types.get(arch))
        if mt is None or mt not in CONFIG_MAPPING:
            out["remote_code"].append(arch)
            continue
        try:
            out["configs"][arch] = shrunk(CONFIG_MAPPING[mt], arch)
        except Exception as e:  # noqa: BLE001 - recorded per architecture
            out["config_errors"][arch] = f"{type(e).__name__}: {e}"[:500]
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
