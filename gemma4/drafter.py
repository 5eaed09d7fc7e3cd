"""The Gemma-4 MTP drafter (HF `Gemma4AssistantForCausalLM`): Q-only layers over the target's KV cache.

One draft step, for every sequence of a batch at once (one query token per sequence):

    x   = [target_embed(token) * sqrt(backbone_hidden), target hidden state]   # 2*backbone wide
    h   = pre_projection(x)                                                    # drafter width
    h   = 4 Gemma-4 decoder layers whose attention is Q-only (q_proj, q_norm, o_proj): K and V
          are read from the paged cache of the *last non-KV-shared target layer of the same type*
    h   = norm(h)
    logits       = lm_head(h)        (E2B/E4B: the centroid-masked head, `use_ordered_embeddings`)
    next hidden  = post_projection(h) (backbone width: the hidden-state input of the next step)

There is no final-logit softcap in the drafter (HF's assistant applies none). Every draft step of
a round sits at the same position, the *constant draft position* P = the position of the last
token the target produced (not yet in its cache), and the drafter never writes KV.

Attention window of the draft layers (`DraftKVBinding`): the query is RoPE'd at P and attends the
target's cache without a causal offset: full layers see every cached position, sliding layers the
last `sliding_window + 1` cached positions (HF's bidirectional rule |q - kv| <= W on the kv axis
flipped to the past). With one query per sequence this is FlashAttention's bottom-right aligned
mask over `seqused_k` cached tokens with `window_left = W`, so the draft runs on every backend the
selector may pick for the draft group (FA has no `q_positions`), and the mask never depends on
where the query's RoPE position is.

Parameter names are HF's (`model.layers.{i}.self_attn.q_proj.weight`, `pre_projection.weight`,
`masked_embedding.centroids.weight`, ...), so `load_drafter` reads assistant checkpoints directly.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kselect.backends.base import AttentionBackend, AttentionMetadata, LayerParams
from kselect.gemma4.config import FULL, SLIDING, Gemma4Args, torch_dtype
from kselect.gemma4.model import MLP, RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq
from kselect.kernels.dtypes import dtype_name
from kselect.selector.vocab import is_fp8


class DrafterError(ValueError):
    """A drafter config or checkpoint that does not fit its target (or is not a Gemma-4 assistant)."""


# ---------------------------------------------------------------------------- arguments


@dataclass
class DrafterArgs:
    """Shapes of the assistant. Head dims, KV heads and the window come from the target (the draft
    layers read its cache); the rest from the model preset's `drafter:` block or the HF config."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    layer_types: list[str]
    backbone_hidden_size: int
    vocab_size: int
    head_dim: int
    global_head_dim: int
    num_key_value_heads: int  # the target's KV heads of its sliding layers
    num_global_key_value_heads: int  # ... and of its full layers (what the draft layers read)
    sliding_window: int
    rms_norm_eps: float = 1e-6
    rope_theta_sliding: float = 10_000.0
    rope_theta_full: float = 1_000_000.0
    partial_rotary_factor_full: float = 0.25
    use_ordered_embeddings: bool = False
    num_centroids: int = 2048
    centroid_intermediate_top_k: int = 32
    attention_k_eq_v: bool = False  # mirrors the target (HF builds the draft layers' GQA from it)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.layer_types = list(self.layer_types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise DrafterError(
                f"drafter layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        bad = sorted(set(self.layer_types) - {SLIDING, FULL})
        if bad:
            raise DrafterError(f"drafter: unknown layer types {bad}; expected {SLIDING!r} or {FULL!r}")
        for t in set(self.layer_types):
            kv = self.kv_heads_of(t)
            if self.num_attention_heads % kv:
                raise DrafterError(
                    f"drafter num_attention_heads={self.num_attention_heads} is not a multiple of the "
                    f"target's {kv} KV heads of its {t} layers (the draft layers read that cache)")
        if self.use_ordered_embeddings:
            if self.vocab_size % self.num_centroids:
                raise DrafterError(
                    f"drafter: vocab_size={self.vocab_size} is not a multiple of num_centroids={self.num_centroids}")
            if not 0 < self.centroid_intermediate_top_k <= self.num_centroids:
                raise DrafterError(
                    f"drafter: centroid_intermediate_top_k={self.centroid_intermediate_top_k} must be in "
                    f"1..num_centroids={self.num_centroids}")

    # -------------------------------------------------------------- construction
    @classmethod
    def from_preset(cls, target: Gemma4Args, block: dict[str, Any] | Any) -> "DrafterArgs":
        """From a preset's `drafter:` block (a dict or the selector's pydantic `Drafter`)."""
        if block is None:
            raise DrafterError(f"model {target.name!r} has no drafter: block (needed for spec_decode=mtp)")
        if hasattr(block, "model_dump"):
            block = block.model_dump()
        b = dict(block)
        try:
            return cls(
                hidden_size=int(b["hidden_size"]), intermediate_size=int(b["intermediate_size"]),
                num_hidden_layers=int(b["num_hidden_layers"]), num_attention_heads=int(b["num_attention_heads"]),
                layer_types=list(b["layer_types"]), use_ordered_embeddings=bool(b.get("use_ordered_embeddings", False)),
                num_centroids=int(b.get("num_centroids", 2048)),
                centroid_intermediate_top_k=int(b.get("centroid_intermediate_top_k", 32)),
                sliding_window=int(b.get("sliding_window") or target.sliding_window),
                **_target_shapes(target))
        except KeyError as e:
            raise DrafterError(f"drafter: block is missing {e.args[0]!r}") from None

    @classmethod
    def from_hf_config(cls, d: dict[str, Any], target: Gemma4Args | None = None) -> "DrafterArgs":
        """From an assistant `config.json` (model_type gemma4_assistant). With `target`, its shapes
        are checked against the target's (they must agree: the draft layers read its cache)."""
        mt = d.get("model_type")
        if mt != "gemma4_assistant":
            raise DrafterError(f"config.json model_type {mt!r} is not 'gemma4_assistant' (a Gemma-4 MTP drafter)")
        tc = d.get("text_config")
        if not isinstance(tc, dict):
            raise DrafterError("gemma4_assistant config.json has no text_config")
        for key in ("hidden_size_per_layer_input", "vocab_size_per_layer_input"):
            if tc.get(key):
                raise DrafterError(f"drafter text_config.{key}={tc[key]}: the assistant has no per-layer embeddings")
        if tc.get("enable_moe_block"):
            raise DrafterError("drafter text_config.enable_moe_block=true: the assistant has no MoE block")
        n = tc["num_hidden_layers"]
        shared = tc.get("num_kv_shared_layers") or n
        if shared != n:
            raise DrafterError(f"drafter: num_kv_shared_layers={shared} != num_hidden_layers={n} "
                               "(every assistant layer reads the target's KV)")
        global_head_dim = tc.get("global_head_dim", 512)
        num_global_kv = tc.get("num_global_key_value_heads")
        layer_types = tc.get("layer_types") or [SLIDING] * (n - 1) + [FULL]
        for idx, over in (tc.get("per_layer_config") or {}).items():
            if layer_types[int(idx)] == FULL:
                global_head_dim = over.get("head_dim", global_head_dim)
                num_global_kv = over.get("num_key_value_heads", num_global_kv)
                break
        rope = tc.get("rope_parameters") or {}
        rs, rf = rope.get(SLIDING) or {}, rope.get(FULL) or {}
        k_eq_v = bool(tc.get("attention_k_eq_v", False))
        kv = tc.get("num_key_value_heads", 1)
        dtype = str(d.get("dtype") or d.get("torch_dtype") or tc.get("dtype") or "bfloat16").removeprefix("torch.")
        args = cls(
            hidden_size=tc["hidden_size"], intermediate_size=tc["intermediate_size"], num_hidden_layers=n,
            num_attention_heads=tc["num_attention_heads"], layer_types=list(layer_types),
            backbone_hidden_size=d.get("backbone_hidden_size", 1536), vocab_size=tc["vocab_size"],
            head_dim=tc.get("head_dim", 256), global_head_dim=global_head_dim, num_key_value_heads=kv,
            num_global_key_value_heads=(num_global_kv if (k_eq_v and num_global_kv) else kv),
            sliding_window=tc.get("sliding_window", 512), rms_norm_eps=tc.get("rms_norm_eps", 1e-6),
            rope_theta_sliding=rs.get("rope_theta", 10_000.0), rope_theta_full=rf.get("rope_theta", 1_000_000.0),
            partial_rotary_factor_full=rf.get("partial_rotary_factor", 0.25) if rf else 0.25,
            use_ordered_embeddings=bool(d.get("use_ordered_embeddings", False)),
            num_centroids=d.get("num_centroids", 2048), centroid_intermediate_top_k=d.get("centroid_intermediate_top_k", 32),
            attention_k_eq_v=k_eq_v, dtype=dtype if dtype in ("float32", "bfloat16", "float16") else "bfloat16")
        if target is not None:
            args.check_target(target)
        return args

    def check_target(self, target: Gemma4Args) -> None:
        """Raise DrafterError when this drafter cannot run on `target`'s cache and embeddings."""
        want = _target_shapes(target)
        errs = []
        for k in ("backbone_hidden_size", "vocab_size", "head_dim", "global_head_dim"):
            if getattr(self, k) != want[k]:
                errs.append(f"{k}={getattr(self, k)} but the target has {want[k]}")
        for t in set(self.layer_types):
            if self.kv_heads_of(t) != _kv_heads(target, t):
                errs.append(f"{t} KV heads {self.kv_heads_of(t)} but the target's {t} cache has {_kv_heads(target, t)}")
            if t not in target.layer_types:
                errs.append(f"a {t} draft layer but the target has no {t} layer to read")
        if errs:
            raise DrafterError("drafter does not fit the target model: " + "; ".join(errs))

    def to_hf_config_dict(self) -> dict[str, Any]:
        """An assistant config.json (model_type gemma4_assistant)."""
        text = dict(
            model_type="gemma4_text", vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, global_head_dim=self.global_head_dim, layer_types=list(self.layer_types),
            sliding_window=self.sliding_window, rms_norm_eps=self.rms_norm_eps, final_logit_softcapping=None,
            rope_parameters={
                SLIDING: {"rope_type": "default", "rope_theta": self.rope_theta_sliding},
                FULL: {"rope_type": "proportional", "partial_rotary_factor": self.partial_rotary_factor_full,
                       "rope_theta": self.rope_theta_full}},
            hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
            num_kv_shared_layers=self.num_hidden_layers, attention_k_eq_v=self.attention_k_eq_v,
            enable_moe_block=False, use_double_wide_mlp=False, hidden_activation="gelu_pytorch_tanh")
        if self.attention_k_eq_v:
            text["num_global_key_value_heads"] = self.num_global_key_value_heads
        return dict(
            model_type="gemma4_assistant", architectures=["Gemma4AssistantForCausalLM"], dtype=self.dtype,
            text_config=text, backbone_hidden_size=self.backbone_hidden_size,
            use_ordered_embeddings=self.use_ordered_embeddings, num_centroids=self.num_centroids,
            centroid_intermediate_top_k=self.centroid_intermediate_top_k, tie_word_embeddings=True)

    def to_hf_config(self):
        """`transformers.Gemma4AssistantConfig` (tests)."""
        from transformers import Gemma4AssistantConfig, Gemma4TextConfig

        d = self.to_hf_config_dict()
        text = {k: v for k, v in d.pop("text_config").items() if k != "model_type"}
        d.pop("model_type"), d.pop("architectures"), d.pop("dtype")
        return Gemma4AssistantConfig(text_config=Gemma4TextConfig(**text), **d)

    # -------------------------------------------------------------- derived
    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    def layer_head_dim(self, layer: int) -> int:
        return self.head_dim if self.is_sliding(layer) else self.global_head_dim

    def kv_heads_of(self, kind: str) -> int:
        return self.num_key_value_heads if kind == SLIDING else self.num_global_key_value_heads

    def to_dict(self) -> dict:
        return asdict(self)


def _kv_heads(target: Gemma4Args, kind: str) -> int:
    return target.num_kv_heads(target.layers_of(kind)[0]) if kind in target.layer_types else 0


def _target_shapes(target: Gemma4Args) -> dict[str, Any]:
    return dict(
        backbone_hidden_size=target.hidden_size, vocab_size=target.vocab_size, head_dim=target.head_dim,
        global_head_dim=target.global_head_dim, num_key_value_heads=_kv_heads(target, SLIDING) or target.num_key_value_heads,
        num_global_key_value_heads=_kv_heads(target, FULL), rms_norm_eps=target.rms_norm_eps,
        rope_theta_sliding=target.rope_theta_sliding, rope_theta_full=target.rope_theta_full,
        partial_rotary_factor_full=target.partial_rotary_factor_full, attention_k_eq_v=target.attention_k_eq_v,
        dtype=target.dtype)


def target_kv_layer(target: Gemma4Args, kind: str) -> int:
    """The target layer whose cache draft layers of type `kind` read: the last non-KV-shared one."""
    layers = [i for i in range(target.first_kv_shared_layer) if target.layer_types[i] == kind]
    if not layers:
        raise DrafterError(f"the target has no non-shared {kind} layer for the drafter to read")
    return layers[-1]


# ---------------------------------------------------------------------------- modules


@dataclass
class DraftGroupStep:
    """What the draft layers of one type read in one draft step."""

    k_cache: torch.Tensor  # the target producer layer's paged K (same tensor the target writes)
    v_cache: torch.Tensor
    backend: AttentionBackend
    meta: AttentionMetadata
    params: LayerParams  # softmax scale 1, window, and the K/V scales this drafter dequantizes with


@dataclass
class DraftContext:
    positions: torch.Tensor  # [B] int64: the constant draft position of each sequence
    groups: dict[str, DraftGroupStep]  # keyed by layer type


class DraftAttention(nn.Module):
    """Q-only attention: q_proj -> q_norm -> RoPE, K/V from the target's cache, o_proj."""

    def __init__(self, args: DrafterArgs, layer: int):
        super().__init__()
        self.kind = args.layer_types[layer]
        self.head_dim = args.layer_head_dim(layer)
        self.n_heads = args.num_attention_heads
        self.q_proj = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, args.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: DraftContext) -> torch.Tensor:
        b = x.shape[0]
        q = apply_rope(self.q_norm(self.q_proj(x).view(b, self.n_heads, self.head_dim)), cos, sin)
        g = ctx.groups[self.kind]
        o = g.backend.forward(q, g.k_cache, g.v_cache, g.meta, g.params)
        return self.o_proj(o.reshape(b, self.n_heads * self.head_dim))


class DraftLayer(nn.Module):
    def __init__(self, args: DrafterArgs, layer: int):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.self_attn = DraftAttention(args, layer)
        self.mlp = MLP(h, args.intermediate_size)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)
        self.register_buffer("layer_scalar", torch.ones(1))

    def forward(self, x, cos, sin, ctx: DraftContext) -> torch.Tensor:
        h = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, ctx))
        h = h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        return h * self.layer_scalar


class DraftBody(nn.Module):
    """HF's `model.` part: the decoder layers and the final norm (its embed_tokens is unused: the
    input is the target's embedding; it only serves as the tied lm_head when lm_head is absent)."""

    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.layers = nn.ModuleList(DraftLayer(args, i) for i in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class MaskedEmbedder(nn.Module):
    """The centroid-masked head (E2B/E4B, `use_ordered_embeddings`): score `num_centroids` centroids,
    keep the top `centroid_intermediate_top_k`, and score only their tokens (vocab/num_centroids
    each, listed in `token_ordering`); every other token gets -inf."""

    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.top_k = args.centroid_intermediate_top_k
        self.num_centroids = args.num_centroids
        self.vocab_size = args.vocab_size
        self.centroids = nn.Linear(args.hidden_size, args.num_centroids, bias=False)
        self.register_buffer("token_ordering", torch.arange(args.vocab_size, dtype=torch.long))

    def forward(self, h: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
        per = self.vocab_size // self.num_centroids
        top = torch.topk(self.centroids(h), self.top_k, dim=-1).indices  # [B, top_k]
        clusters = self.token_ordering.view(self.num_centroids, per)
        cand = clusters[top].reshape(h.shape[0], -1)  # [B, top_k * per] token ids
        scores = torch.einsum("bd,bkd->bk", h, lm_head_weight[cand])
        out = torch.full((h.shape[0], self.vocab_size), float("-inf"), dtype=scores.dtype, device=h.device)
        return out.scatter_(1, cand, scores)


class Drafter(nn.Module):
    def __init__(self, args: DrafterArgs):
        super().__init__()
        self.args = args
        self.model = DraftBody(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.pre_projection = nn.Linear(2 * args.backbone_hidden_size, args.hidden_size, bias=False)
        self.post_projection = nn.Linear(args.hidden_size, args.backbone_hidden_size, bias=False)
        self.masked_embedding = MaskedEmbedder(args) if args.use_ordered_embeddings else None
        self.register_buffer("sliding_inv_freq", rope_inv_freq(args.head_dim, args.rope_theta_sliding),
                             persistent=False)
        self.register_buffer("full_inv_freq", rope_inv_freq(args.global_head_dim, args.rope_theta_full,
                                                            args.partial_rotary_factor_full), persistent=False)

    def keep_rope_fp32(self) -> "Drafter":
        """Recompute the RoPE inverse frequencies in fp32 after a cast (bf16 rounds them, as in the target)."""
        a, dev = self.args, self.lm_head.weight.device
        self.sliding_inv_freq = rope_inv_freq(a.head_dim, a.rope_theta_sliding).to(dev)
        self.full_inv_freq = rope_inv_freq(a.global_head_dim, a.rope_theta_full, a.partial_rotary_factor_full).to(dev)
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def forward(self, inputs: torch.Tensor, ctx: DraftContext) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs [B, 2*backbone] = [target embedding * sqrt(backbone), target hidden] ->
        (logits [B, V] fp32, next hidden [B, backbone])."""
        for g in ctx.groups.values():
            g.meta.begin_step()
        h = self.pre_projection(inputs.to(self.dtype))
        rope = {SLIDING: rope_cos_sin(ctx.positions, self.sliding_inv_freq, h.dtype),
                FULL: rope_cos_sin(ctx.positions, self.full_inv_freq, h.dtype)}
        for i, layer in enumerate(self.model.layers):
            cos, sin = rope[self.args.layer_types[i]]
            h = layer(h, cos, sin, ctx)
        h = self.model.norm(h)
        if self.masked_embedding is not None:
            logits = self.masked_embedding(h, self.lm_head.weight)
        else:
            logits = self.lm_head(h)
        return logits.float(), self.post_projection(h)


def draft_inputs(target, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """[target embedding of `tokens` * sqrt(backbone hidden) (the scale cast to the weight dtype,
    as the target's own embedding), the target's final-normed hidden state] -> [B, 2*backbone]."""
    w = target.embed_tokens.weight
    scale = float(torch.tensor(math.sqrt(w.shape[1]), dtype=w.dtype))  # a host float: CUDA-graph safe
    emb = F.embedding(tokens, w) * scale
    return torch.cat([emb, hidden.to(emb.dtype)], dim=-1)


# ---------------------------------------------------------------------------- weights


def init_drafter_weights(drafter: Drafter, seed: int = 0) -> Drafter:
    """Deterministic weights: linears ~ N(0, 1/fan_in), norms and layer scalars ~ 1 + N(0, 0.1^2),
    token_ordering a seeded permutation (independent of device and module order)."""
    gen = torch.Generator().manual_seed(seed)
    state = drafter.state_dict()
    with torch.no_grad():
        for name in sorted(state):
            t = state[name]
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "token_ordering":
                v = torch.randperm(t.numel(), generator=gen)
            elif "norm" in name or leaf == "layer_scalar":
                v = 1.0 + 0.1 * torch.randn(t.shape, generator=gen)
            else:
                v = torch.randn(t.shape, generator=gen) / math.sqrt(t.shape[-1])
            t.copy_(v.to(t.dtype))
    return drafter


def copy_init(drafter: Drafter, target_embedding: torch.Tensor, residual_scale: float = 0.1) -> Drafter:
    """Make a (random) drafter a noisy *copy drafter*: it proposes the token it was fed.

    The embedding half of `pre_projection` (P) maps the target embedding e_t to P e_t; the head's row
    t becomes P e_t / |P e_t| (after unit final-norm weights), so with the decoder layers muted the
    logits are the cosine between P e_t and P e_t', largest at t' = t. The layers' post-attention
    and post-MLP norm weights and the hidden-state half of `pre_projection` are scaled by
    `residual_scale`: context still perturbs the drafts. Deterministic given
    the drafter's weights. A heuristic init (random tiny targets repeat tokens a lot), not a trained
    drafter: the acceptance it gets is measured, never assumed."""
    a = drafter.args
    with torch.no_grad():
        w = target_embedding.detach().to(torch.float32)  # on the target's device (31B: a 262144 x 5376 matmul)
        p = drafter.pre_projection.weight[:, : a.backbone_hidden_size].detach().float().to(w.device)
        rows = (w * math.sqrt(a.backbone_hidden_size)) @ p.t()  # [V, draft hidden]
        rows = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        drafter.lm_head.weight.copy_(rows.to(drafter.lm_head.weight))
        drafter.model.norm.weight.fill_(1.0)
        drafter.pre_projection.weight[:, a.backbone_hidden_size:].mul_(residual_scale)
        for layer in drafter.model.layers:
            layer.post_attention_layernorm.weight.mul_(residual_scale)
            layer.post_feedforward_layernorm.weight.mul_(residual_scale)
            layer.layer_scalar.fill_(1.0)
    return drafter


def build_random_drafter(args: DrafterArgs, seed: int = 0, device="cpu", dtype: torch.dtype | None = None,
                         copy_from: torch.Tensor | None = None) -> Drafter:
    """Seeded random weights; with `copy_from` (the target's embedding) the `copy_init` heuristic."""
    d = init_drafter_weights(Drafter(args), seed)
    if copy_from is not None:
        copy_init(d, copy_from)
    return d.to(device=device, dtype=dtype or args.torch_dtype).eval().keep_rope_fp32()


_IGNORED = ("model.embed_tokens.weight",)  # the draft-width embedding: unused (tied to lm_head)


def hf_state_dict(drafter: Drafter) -> dict[str, torch.Tensor]:
    """Our weights under HF's names (for `Gemma4AssistantForCausalLM.load_state_dict`)."""
    sd = {k: v for k, v in drafter.state_dict().items()}
    sd["model.embed_tokens.weight"] = sd["lm_head.weight"]
    return sd


def save_drafter(drafter: Drafter, folder: str | Path) -> Path:
    """An HF-style assistant folder: config.json + model.safetensors (lm_head tied into embed_tokens)."""
    from safetensors.torch import save_file

    from kselect.selector.files import atomic_write, replaced

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
    from kselect.gemma4.checkpoint import (  # one reader for target and drafter checkpoints
        CheckpointError, precheck, read_config_json)

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
    from kselect.gemma4.checkpoint import CheckpointError, _shard_files, read_safetensors

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


# ---------------------------------------------------------------------------- KV binding


class DraftKVBinding:
    """Wires each draft layer type to the target's paged cache (same tensors, same block tables),
    on the draft group's backend, with the K/V scales the selection says (`copied_from_target` or
    the drafter's own `unit` scales).

    `kv_view` picks which cached positions a draft step reads:
      committed  the target's accepted tokens only (positions < P): full layers all of them,
                 sliding layers the last W+1. The default.
      hf         HF transformers 5.x assisted generation, bit for bit: its drafter reads the
                 `shared_kv_states` of the *last verification pass*, rejected drafts included
                 (full layers: positions <= P, i.e. the rejected slot at P when there was a
                 rejection; sliding layers: the last W+1 positions the pass wrote). The rejected
                 K/V are still in our cache slots (rollback only moves the sequence length), so
                 the same reads are possible. Used by the HF parity test.
    """

    def __init__(self, target_args: Gemma4Args, dargs: DrafterArgs, cache, draft_groups: dict,
                 target_groups: dict | None = None, backends: dict[str, AttentionBackend] | None = None,
                 copy_scales: bool | None = None, kv_view: str = "committed"):
        from kselect.backends.registry import make_backend

        if kv_view not in ("committed", "hf"):
            raise ValueError(f"kv_view must be 'committed' or 'hf', got {kv_view!r}")
        dargs.check_target(target_args)
        self.kv_view = kv_view
        self.cache = cache
        self.kinds = sorted(set(dargs.layer_types))
        self.layer: dict[str, int] = {}
        self.params: dict[str, LayerParams] = {}
        self.backends: dict[str, AttentionBackend] = {}
        self.scales_mode: dict[str, str] = {}
        for kind in self.kinds:
            src = target_kv_layer(target_args, kind)
            gc = cache.groups[kind]
            if src not in gc.k:
                raise DrafterError(f"target layer {src} owns no {kind} cache")
            g = draft_groups.get(kind)
            if g is None:
                raise DrafterError(f"the selection has no draft group for the drafter's {kind} layers")
            if g.reads_from and tuple(g.reads_from) != (src,):
                raise DrafterError(f"draft {g.kind} group reads_from={g.reads_from} but the last non-shared "
                                   f"{kind} target layer is {src}")
            if g.kv_block_size != gc.block_size or g.kv_cache_dtype != _kv_name(gc):
                raise DrafterError(f"draft {g.kind} group (kv block {g.kv_block_size}, {g.kv_cache_dtype}) does not "
                                   f"match the target cache it reads (kv block {gc.block_size}, {_kv_name(gc)})")
            tg = (target_groups or {}).get(kind)
            if tg is not None and (tg.backend, tg.flash_attn_version) != (g.backend, g.flash_attn_version):
                raise DrafterError(f"draft {g.kind} group runs {g.backend} v{g.flash_attn_version} but the target's "
                                   f"runs {tg.backend} v{tg.flash_attn_version}: the drafter must use the target's backend")
            self.layer[kind] = src
            self.backends[kind] = (backends or {}).get(kind) or make_backend(g)
            copy = copy_scales if copy_scales is not None else g.kv_scales == "copied_from_target"
            window = dargs.sliding_window if kind == SLIDING else -1
            p = LayerParams(softmax_scale=1.0, window_left=window)
            if gc.fp8:
                if copy:  # the very tensors the target dequantizes with (calibration updates them in place)
                    p.k_scale, p.v_scale = gc.k_scale[src], gc.v_scale[src]
                else:  # the drafter's own scales: 1.0 (assistant checkpoints ship none)
                    one = torch.ones((), dtype=torch.float32, device=gc.device)
                    p.k_scale, p.v_scale = one, one.clone()
                self.scales_mode[kind] = "copied_from_target" if copy else "unit"
            else:
                self.scales_mode[kind] = "none"
            self.params[kind] = p

    def used(self, kind: str, positions: list[int], written: list[int]) -> list[int]:
        """Cached tokens a draft step of a `kind` layer reads, per sequence (see `kv_view`)."""
        if self.kv_view == "committed":
            return list(positions)
        if kind == FULL:
            return [min(p + 1, w) for p, w in zip(positions, written)]
        return list(written)

    def context(self, seqs: list[int], positions: list[int], written: list[int], device) -> DraftContext:
        """Metadata for one draft step: sequence seqs[i] drafts at positions[i] (= its committed
        length P); `written[i]` = positions its last target pass wrote (>= P; only the hf view reads it)."""
        b = len(seqs)
        cu = torch.arange(b + 1, dtype=torch.int32, device=device)
        metas = {}
        for kind in self.kinds:
            used = self.used(kind, positions, written)
            metas[kind] = AttentionMetadata(
                cu_seqlens_q=cu, seqused_k=torch.tensor(used, dtype=torch.int32, device=device),
                block_table=self.cache.groups[kind].block_table(seqs).to(device),
                max_seqlen_q=1, max_seqlen_k=max(used))
        return self.static_context(torch.tensor(positions, dtype=torch.long, device=device), metas)

    def static_context(self, positions: torch.Tensor, metas: dict[str, AttentionMetadata]) -> DraftContext:
        """A draft context over given metadata (a CUDA graph's static buffers, or one step's)."""
        groups = {}
        for kind in self.kinds:
            k, v = self.cache.groups[kind].kv(self.layer[kind])
            groups[kind] = DraftGroupStep(k, v, self.backends[kind], metas[kind], self.params[kind])
        return DraftContext(positions=positions, groups=groups)


def _kv_name(gc) -> str:
    return dtype_name(gc.dtype)


def draft_groups_of(selection, target_groups: dict, *, copy_scales: bool | None = None) -> dict:
    """The draft groups of a selection keyed by layer type; derived from the target groups (same
    backend, block and KV dtype; `draft=True`) when the selection has none (hand-made selections)."""
    from kselect.gemma4.kv_cache import GROUP_TO_LAYER_TYPE

    groups = getattr(selection, "groups", None) or ()
    out = {GROUP_TO_LAYER_TYPE[g.kind]: g for g in groups if g.draft}
    if out:
        return out
    for kind, g in target_groups.items():
        fp8 = is_fp8(g.kv_cache_dtype)
        scales = ("copied_from_target" if copy_scales else "unit") if fp8 else "none"
        out[kind] = g.model_copy(update=dict(draft=True, reads_from=(), kv_scales=scales))
    return out
