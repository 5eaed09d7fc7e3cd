"""A from-scratch Gemma-4 text decoder (all four variants: E2B/E4B edge, 26B-A4B MoE, 31B dense): its modules.

Tokens are flattened: every forward takes `input_ids` [T] and `positions` [T] of a batch of
sequences laid end to end (varlen), plus a `StepContext` (gemma4/step_context.py) that carries, per KV-cache
group, the paged cache, the attention backend and its metadata. Attention is one call to the group's
`AttentionBackend.forward` (prefill and decode alike): the model never sees which kernel runs.

The modules hold the weights; the maths runs in gemma4/forward.py, once, over the ops of the compute mode
(`set_compute`): gemma4/ops.py's PyTorch ops or gemma4/fused.py's fused kernels.

Parameter names follow Hugging Face's `Gemma4TextModel`, so HF checkpoints load directly
(see gemma4/checkpoint.py): `embed_tokens.weight`, `layers.{i}.self_attn.q_proj.weight`, ...
"""

from __future__ import annotations

import torch
from torch import nn

from . import forward as fwd
from .config import SLIDING, Gemma4Args
from .fused import ops_for
from .layers import (  # noqa: F401 - the building blocks, importable from here as before
    MLP, Experts, RMSNorm, Router, apply_rope, gelu_tanh, rope_cos_sin, rope_inv_freq, rope_row_tables, softcap_logits)
from .ops import TORCH
from .step_context import GroupStep, StepContext  # noqa: F401 - re-exported


# ---------------------------------------------------------------------------- attention


class Attention(nn.Module):
    """One attention layer's weights and shape (gemma4/forward.py `attention` computes it)."""

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

    def input_projections(self) -> list[nn.Linear]:
        """The projections of the layer's input, in q/k/v order: q alone where the layer reuses another's KV."""
        if self.kv_shared:
            return [self.q_proj]
        return [self.q_proj, self.k_proj] + ([self.v_proj] if self.v_proj is not None else [])


# ---------------------------------------------------------------------------- decoder layer


class DecoderLayer(nn.Module):
    """One decoder layer's weights (gemma4/forward.py `layer` computes it)."""

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


# ---------------------------------------------------------------------------- the model


COMPUTE_MODES = ("auto", "unfused", "triton", "triton_serial", "triton_cublas", "compile")


class Gemma4(nn.Module):
    """The text decoder with a tied LM head (HF `Gemma4TextModel` + `lm_head` tied to the embedding).

    On CUDA, forward runs gemma4/fused.py's ops (fused q/k/v and gate/up GEMMs, Triton norm/rope/KV-write/GeGLU
    kernels); on CPU gemma4/ops.py's, the modules' maths, which are also the reference the fused kernels are tested
    against."""

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
    def scale_in(dtype: torch.dtype, scale: float) -> float:
        """The scale rounded to the weight dtype, as HF applies it (sqrt(5376) = 73.3 is 73.5 in bf16).
        A Python float so the multiply needs no host-to-device copy (CUDA-graph safe)."""
        return float(torch.tensor(scale, dtype=torch.float32).to(dtype))


    def _embed(self, ids: torch.Tensor, ops=TORCH) -> torch.Tensor:
        """The scaled token embedding (gemma4/forward.py `embed`)."""
        return fwd.embed(self, ids, ops)

    def _per_layer_inputs(self, ids: torch.Tensor, emb: torch.Tensor, ops=TORCH) -> torch.Tensor:
        """The per-layer inputs [T, L, P] (gemma4/forward.py `per_layer_inputs`)."""
        return fwd.per_layer_inputs(self, ids, emb, ops)

    def rope_tables_all(self, positions: torch.Tensor, dtype: torch.dtype, ops=TORCH) -> dict:
        """{kind: (cos, sin)} for both layer types from one table (gemma4/forward.py `rope_tables`): three kernels
        (`rope_row_tables`) where rope_cos_sin takes seven a type, and bit-equal to it per type."""
        return fwd.rope_tables(self, positions, dtype, ops)

    def set_compute(self, mode: str) -> "Gemma4":
        """How forward computes: "auto" (fused Triton kernels on CUDA, the plain modules elsewhere),
        "unfused" (gemma4/ops.py's PyTorch ops everywhere), "triton" (gemma4/fused.py with kernels/ Triton
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
        for g in ctx.groups.values():
            g.meta.begin_step()
        return fwd.forward(self, input_ids, ctx, ops_for(self.compute_mode(ctx)))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The tied LM head with the logit softcap."""
        return fwd.lm_head(self, hidden, ops_for(self._mode()))
