"""A from-scratch Gemma-4 text decoder (all four variants: E2B/E4B edge, 26B-A4B MoE, 31B dense).

Tokens are flattened: every forward takes `input_ids` [T] and `positions` [T] of a batch of
sequences laid end to end (varlen), plus a `StepContext` that carries, per KV-cache group, the
paged cache, the attention backend and its metadata. Attention is one call to the group's
`AttentionBackend.forward` (prefill and decode alike): the model never sees which kernel runs.

Parameter names follow Hugging Face's `Gemma4TextModel`, so HF checkpoints load directly
(see gemma4/checkpoint.py): `embed_tokens.weight`, `layers.{i}.self_attn.q_proj.weight`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from kselect.gemma4.config import FULL, SLIDING, Gemma4Args

if TYPE_CHECKING:  # pragma: no cover
    from kselect.backends.base import AttentionBackend, AttentionMetadata
    from kselect.gemma4.kv_cache import GroupCache


# ---------------------------------------------------------------------------- step context


@dataclass
class GroupStep:
    """One KV-cache group during one forward step."""

    cache: "GroupCache"
    backend: "AttentionBackend"
    meta: "AttentionMetadata"
    slot_mapping: torch.Tensor  # [T] int64 flat cache slots of the new tokens (-1 = padding)
    # Vision mode, sliding layers: image-span queries whose span reaches more than window_left keys
    # ahead. HF limits span keys by the window on the past side only, the backends' window is
    # symmetric: each entry (query rows [n], metadata, window_left) recomputes those rows as one
    # causal query at the span's last position with a widened window (see ModelRunner.far_span_queries).
    far: list = field(default_factory=list)


@dataclass
class StepContext:
    positions: torch.Tensor  # [T] int64 absolute positions of the new tokens
    groups: dict[str, GroupStep]  # keyed by layer type: sliding_attention / full_attention
    # Calibration: when a dict, every KV-producing layer records (amax|K|, amax|V|) here.
    kv_amax: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    static: bool = False  # CUDA-graph-safe code paths: no host syncs (set by gemma4/model_runner.py)


# ---------------------------------------------------------------------------- building blocks


class RMSNorm(nn.Module):
    """x * (mean(x^2)+eps)^-0.5 [* weight], computed in fp32. The weight multiplies directly (no 1+w)."""

    def __init__(self, dim: int, eps: float = 1e-6, with_scale: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if with_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            out = out * self.weight.float()
        return out.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, partial: float = 1.0) -> torch.Tensor:
    """[head_dim/2] inverse frequencies. Default RoPE: partial=1. Proportional RoPE (full layers):
    the first int(partial*head_dim/2) pairs get theta^(-2i/head_dim) (denominator = the FULL head
    dim), the remaining pairs get 0, i.e. are not rotated."""
    n_rot = int(partial * head_dim // 2)
    inv = 1.0 / (theta ** (torch.arange(0, 2 * n_rot, 2, dtype=torch.float32) / head_dim))
    return torch.cat([inv, torch.zeros(head_dim // 2 - n_rot, dtype=torch.float32)])


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    freqs = positions.float()[:, None] * inv_freq[None, :].to(positions.device)
    emb = torch.cat([freqs, freqs], dim=-1)  # NeoX rotate_half layout
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos/sin [T, D]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """GeGLU: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(gelu_tanh(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, args: Gemma4Args):
        super().__init__()
        self.top_k = args.top_k_experts
        self.root_size = args.hidden_size**-0.5
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps, with_scale=False)
        self.proj = nn.Linear(args.hidden_size, args.num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(args.hidden_size))
        self.per_expert_scale = nn.Parameter(torch.ones(args.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x) * self.scale * self.root_size
        probs = F.softmax(self.proj(h), dim=-1, dtype=torch.float32)  # over all experts
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        return w * self.per_expert_scale[idx], idx  # [T, K] fp32, [T, K]


class Experts(nn.Module):
    """E GeGLU experts as 3D tensors (HF layout): gate_up_proj [E, 2I, H], down_proj [E, H, I]."""

    def __init__(self, args: Gemma4Args):
        super().__init__()
        e, h, i = args.num_experts, args.hidden_size, args.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, static: bool = False) -> torch.Tensor:
        if static:
            return self._forward_gathered(x, weights, idx)
        out = torch.zeros_like(x)
        k = idx.shape[1]
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.gate_up_proj.shape[0]).tolist()
        token = order // k
        w = weights.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            t, we = token[start : start + n], w[start : start + n]
            start += n
            gate, up = F.linear(x[t], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(gelu_tanh(gate) * up, self.down_proj[e]) * we[:, None]
            out.index_add_(0, t, y.to(out.dtype))
        return out

    def _forward_gathered(self, x, weights, idx):
        """No host syncs (CUDA-graph safe): gather each token's K experts and batch-multiply."""
        t, k = idx.shape
        xs = x.repeat_interleave(k, dim=0)[:, :, None]  # [T*K, H, 1]
        gate, up = torch.bmm(self.gate_up_proj[idx.reshape(-1)], xs).squeeze(-1).chunk(2, dim=-1)
        y = torch.bmm(self.down_proj[idx.reshape(-1)], (gelu_tanh(gate) * up)[:, :, None]).squeeze(-1)
        y = y * weights.reshape(-1)[:, None]
        return y.view(t, k, -1).sum(1).to(x.dtype)


# ---------------------------------------------------------------------------- attention


class Attention(nn.Module):
    def __init__(self, args: Gemma4Args, layer: int):
        super().__init__()
        self.layer = layer
        self.kind = args.layer_types[layer]
        self.head_dim = args.layer_head_dim(layer)
        self.n_heads = args.num_attention_heads
        self.n_kv = args.num_kv_heads(layer)
        self.window_left = args.sliding_window - 1 if self.kind == SLIDING else -1
        self.kv_shared = args.is_kv_shared(layer)
        self.kv_source = args.kv_source(layer)  # whose cache we read (ourselves unless shared)
        h, d = args.hidden_size, self.head_dim
        self.q_proj = nn.Linear(h, self.n_heads * d, bias=False)
        self.q_norm = RMSNorm(d, args.rms_norm_eps)
        if not self.kv_shared:
            self.k_proj = nn.Linear(h, self.n_kv * d, bias=False)
            # K=V global layers: no v_proj, V is the raw k_proj output
            self.v_proj = None if args.k_eq_v(layer) else nn.Linear(h, self.n_kv * d, bias=False)
            self.k_norm = RMSNorm(d, args.rms_norm_eps)
            self.v_norm = RMSNorm(d, args.rms_norm_eps, with_scale=False)
        self.o_proj = nn.Linear(self.n_heads * d, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        t = x.shape[0]
        g = ctx.groups[self.kind]
        q = apply_rope(self.q_norm(self.q_proj(x).view(t, self.n_heads, self.head_dim)), cos, sin)
        if not self.kv_shared:
            k_raw = self.k_proj(x).view(t, self.n_kv, self.head_dim)
            v_raw = k_raw if self.v_proj is None else self.v_proj(x).view(t, self.n_kv, self.head_dim)
            k = apply_rope(self.k_norm(k_raw), cos, sin)
            v = self.v_norm(v_raw)
            if ctx.kv_amax is not None:
                ctx.kv_amax[self.layer] = (k.detach().abs().amax().float(), v.detach().abs().amax().float())
            g.cache.write(self.layer, k, v, g.slot_mapping, static=ctx.static)
        k_cache, v_cache = g.cache.kv(self.kv_source)
        o = g.backend.forward(q, k_cache, v_cache, g.meta, g.cache.layer_params(self.kv_source, self.window_left))
        for rows, meta, window_left in g.far:
            o[rows] = g.backend.forward(q[rows], k_cache, v_cache, meta, g.cache.layer_params(self.kv_source, window_left))
        return self.o_proj(o.reshape(t, self.n_heads * self.head_dim))


# ---------------------------------------------------------------------------- decoder layer


class DecoderLayer(nn.Module):
    def __init__(self, args: Gemma4Args, layer: int):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.layer = layer
        self.self_attn = Attention(args, layer)
        self.mlp = MLP(h, args.mlp_intermediate(layer))
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.post_feedforward_layernorm = RMSNorm(h, eps)
        self.register_buffer("layer_scalar", torch.ones(1))
        self.ple_dim = args.hidden_size_per_layer_input
        if self.ple_dim:
            self.per_layer_input_gate = nn.Linear(h, self.ple_dim, bias=False)
            self.per_layer_projection = nn.Linear(self.ple_dim, h, bias=False)
            self.post_per_layer_input_norm = RMSNorm(h, eps)
        self.moe = args.enable_moe_block
        if self.moe:
            self.router = Router(args)
            self.experts = Experts(args)
            self.post_feedforward_layernorm_1 = RMSNorm(h, eps)
            self.post_feedforward_layernorm_2 = RMSNorm(h, eps)
            self.pre_feedforward_layernorm_2 = RMSNorm(h, eps)

    def forward(self, x, cos, sin, ctx: StepContext, ple: torch.Tensor | None) -> torch.Tensor:
        h = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, ctx))
        y = self.mlp(self.pre_feedforward_layernorm(h))
        if self.moe:  # the expert block also reads the pre-MLP residual h
            w, idx = self.router(h)
            y2 = self.experts(self.pre_feedforward_layernorm_2(h), w, idx, ctx.static)
            y = self.post_feedforward_layernorm_1(y) + self.post_feedforward_layernorm_2(y2)
        h = h + self.post_feedforward_layernorm(y)
        if self.ple_dim:
            p = gelu_tanh(self.per_layer_input_gate(h)) * ple
            h = h + self.post_per_layer_input_norm(self.per_layer_projection(p))
        return h * self.layer_scalar


# ---------------------------------------------------------------------------- the model


def rope_row_tables(positions: torch.Tensor, inv: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [T, F] of positions [T] times one frequency row inv [F], each rounding once as it stores."""
    # integer positions * fp32 frequencies multiply in fp32, as positions.float() * inv does (one kernel fewer);
    # frequencies left in a 16-bit dtype (no keep_rope_fp32) would multiply in it, so those positions go to fp32
    pos = positions if inv.dtype == torch.float32 else positions.float()
    freqs = pos[:, None] * inv[None, :]
    cos = torch.empty(freqs.shape, dtype=dtype, device=freqs.device)
    sin = torch.empty_like(cos)
    torch.cos(freqs, out=cos)
    torch.sin(freqs, out=sin)
    return cos, sin


def softcap_logits(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """Gemma's final logit softcap."""
    return torch.tanh(logits / cap) * cap


COMPUTE_MODES = ("auto", "unfused", "triton", "triton_serial", "triton_cublas", "compile")


class Gemma4(nn.Module):
    """The text decoder with a tied LM head (HF `Gemma4TextModel` + `lm_head` tied to the embedding).

    On CUDA, forward runs gemma4/fused.py (fused q/k/v and gate/up GEMMs, Triton norm/rope/KV-write/GeGLU
    kernels); on CPU the modules below, which are also the reference the fused kernels are tested against."""

    def __init__(self, args: Gemma4Args):
        super().__init__()
        self.args = args
        self.compute = "auto"  # see set_compute
        h, L = args.hidden_size, args.num_hidden_layers
        self.embed_tokens = nn.Embedding(args.vocab_size, h)
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(L))
        self.norm = RMSNorm(h, args.rms_norm_eps)
        self.ple_dim = args.hidden_size_per_layer_input
        if self.ple_dim:
            self.embed_tokens_per_layer = nn.Embedding(args.vocab_size_per_layer_input, L * self.ple_dim)
            self.per_layer_model_projection = nn.Linear(h, L * self.ple_dim, bias=False)
            self.per_layer_projection_norm = RMSNorm(self.ple_dim, args.rms_norm_eps)
        self.register_buffer(
            "sliding_inv_freq", rope_inv_freq(args.head_dim, args.rope_theta_sliding), persistent=False
        )
        self.register_buffer(
            "full_inv_freq",
            rope_inv_freq(args.global_head_dim, args.rope_theta_full, args.partial_rotary_factor_full),
            persistent=False,
        )
        self.register_buffer("rope_inv_row", self._inv_row(), persistent=False)  # rope_tables_all's frequencies

    def keep_rope_fp32(self) -> "Gemma4":
        """Recompute the RoPE inverse frequencies in fp32 on the model's device (`.to(bfloat16)` rounds
        them, which shifts angles by ~1 rad at position 500; HF keeps them in fp32). Returns self."""
        a = self.args
        dev = self.embed_tokens.weight.device
        self.sliding_inv_freq = rope_inv_freq(a.head_dim, a.rope_theta_sliding).to(dev)
        self.full_inv_freq = rope_inv_freq(a.global_head_dim, a.rope_theta_full, a.partial_rotary_factor_full).to(dev)
        self.rope_inv_row = self._inv_row()
        return self

    def _inv_row(self) -> torch.Tensor:
        """[sliding, sliding, full, full] inverse frequencies: both types' NeoX-doubled rows as one."""
        s, f = self.sliding_inv_freq, self.full_inv_freq
        return torch.cat([s, s, f, f])

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @staticmethod
    def _scale_in(dtype: torch.dtype, scale: float) -> float:
        """The scale rounded to the weight dtype, as HF applies it (sqrt(5376) = 73.3 is 73.5 in bf16).
        A Python float so the multiply needs no host-to-device copy (CUDA-graph safe)."""
        return float(torch.tensor(scale, dtype=torch.float32).to(dtype))

    def _embed(self, ids: torch.Tensor, ops=None) -> torch.Tensor:
        """The scaled token embedding; `ops` (gemma4/fused.py): gather and scale in its one kernel."""
        w = self.embed_tokens.weight
        scale = self._scale_in(w.dtype, self.args.embed_scale)
        return ops.embedding(ids, w, scale) if ops else F.embedding(ids, w) * scale

    def _per_layer_inputs(self, ids: torch.Tensor, emb: torch.Tensor, ops=None) -> torch.Tensor:
        """PLE_i = (token part + context part) * 2^-0.5, as [T, L, P]. `ops` (gemma4/fused.py): its kernels instead of
        the modules' (the module norm alone is 7 kernels)."""
        t, L, p = ids.shape[0], self.args.num_hidden_layers, self.ple_dim
        w = self.embed_tokens_per_layer.weight
        scale = self._scale_in(w.dtype, p**0.5)
        proj, norm = self.per_layer_model_projection, self.per_layer_projection_norm
        if ops:  # a gather-and-scale kernel; the scale in the projection's epilogue; norm, add and mix in one kernel
            tok = ops.embedding(ids, w, scale)
            ctx = ops.linear(emb, proj.weight, scale=self.args.hidden_size**-0.5)
            return ops.add_rms_norm(ctx.view(t, L, p), tok.view(t, L, p), norm.weight, norm.eps, 2.0**-0.5)[0]
        tok = F.embedding(ids, w) * scale
        ctx = norm((proj(emb) * self.args.hidden_size**-0.5).view(t, L, p))
        return (ctx + tok.view(t, L, p)) * 2.0**-0.5

    def rope_tables_all(self, positions: torch.Tensor, dtype: torch.dtype, ops=None) -> dict:
        """{kind: (cos, sin)} for both layer types from one table: the types' NeoX-doubled frequencies are one row,
        and each type's tables are column views of it. Three kernels (`rope_row_tables`) where rope_cos_sin takes
        seven a type, and bit-equal to it per type; `ops` (gemma4/fused.py): its one kernel."""
        cos, sin = (ops.rope_tables if ops else rope_row_tables)(positions, self.rope_inv_row, dtype)
        ds = 2 * self.sliding_inv_freq.numel()
        return {SLIDING: (cos[:, :ds], sin[:, :ds]), FULL: (cos[:, ds:], sin[:, ds:])}

    def set_compute(self, mode: str) -> "Gemma4":
        """How forward computes: "auto" (fused Triton kernels on CUDA, the plain modules elsewhere),
        "unfused" (the plain modules everywhere), "triton" (gemma4/fused.py with kernels/ Triton
        kernels, CUDA or Triton's interpreter; programmatic dependent launch on SM90), "triton_serial" (the same
        kernels launched plainly), "triton_cublas" (the same, every projection on cuBLAS),
        "compile" (the same fused regions through torch.compile)."""
        if mode not in COMPUTE_MODES:
            raise ValueError(f"compute mode {mode!r}: use one of {', '.join(COMPUTE_MODES)}")
        self.compute = mode
        return self

    def _mode(self) -> str:
        """self.compute with "auto" resolved for the model's device."""
        if self.compute == "auto":
            return "triton" if self.embed_tokens.weight.is_cuda else "unfused"
        return self.compute

    def compute_mode(self, ctx: StepContext) -> str:
        return "unfused" if ctx.kv_amax is not None else self._mode()  # calibration records amax in the modules

    def forward(self, input_ids: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """input_ids [T] -> final-normed hidden states [T, hidden]."""
        mode = self.compute_mode(ctx)
        for g in ctx.groups.values():
            g.meta.begin_step()
        if mode != "unfused":
            from kselect.gemma4 import fused

            return fused.forward(self, input_ids, ctx, fused.ops_for(mode))
        x = self._embed(input_ids)
        ple = self._per_layer_inputs(input_ids, x) if self.ple_dim else None
        rope = self.rope_tables_all(ctx.positions, x.dtype)
        for i, layer in enumerate(self.layers):
            cos, sin = rope[self.args.layer_types[i]]
            x = layer(x, cos, sin, ctx, None if ple is None else ple[:, i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        mode = self._mode()
        if mode != "unfused":
            from kselect.gemma4 import fused

            return fused.lm_head(self, hidden, fused.ops_for(mode))  # the softcap included
        logits = F.linear(hidden, self.embed_tokens.weight)  # tied head
        cap = self.args.final_logit_softcapping
        return softcap_logits(logits, cap) if cap else logits
