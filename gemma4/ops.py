"""The ops the one Gemma-4 forward (gemma4/forward.py) computes with, as plain PyTorch: `TorchOps`.

An ops object answers every region of the forward that has more than one implementation:

    prepare(model)                     once per forward (fused ops: concatenate q/k/v and gate/up weights)
    launches(model, tokens)            a context the step's kernels launch in (fused ops: PDL, kernels/pdl.py;
                                       a side stream for prefetches)
    prefetches()                       whether this step takes prefetch hints (fused ops: PREFETCH, in a graph)
    prefetch(*weights, limit)          a hint: these weights are read soon (fused ops in a CUDA graph: into L2
                                       beside the step, kernels/l2_prefetch.py); changes no result
    embedding(ids, w, scale)           gather and scale
    rope_tables(positions, inv, dtype) (cos, sin) of one frequency row
    linear(x, w, scale, softcap)       x @ w.T, then `* scale` and the logit softcap where given
    linear_gelu_mul(x, w, mul)         gelu_tanh(x @ w.T) * mul
    rms_norm(x, w, eps)                the input norm of the first layer
    add_rms_norm(y, res, wa, eps, scalar, wb)
                                       (s, x): s = (res + norm_wa(y)) [* scalar], the residual; x = norm_wb(s)
                                       (s itself without wb), what the next projection reads (fused ops, one
                                       row: a pending value that projection computes in its prologue)
    ready(x)                           x as a tensor (fused ops: a pending add-norm computed)
    qkv(attn, xn, cos, sin, ctx, group, params, cache_dtype)
                                       q of an attention layer, its K/V written to the paged cache
    mlp(mlp, z)                        the dense GeGLU block

`TorchOps` runs the modules' own maths op for op, bit for bit as Hugging Face's eager code computes
(tests/gemma4/test_hf_parity.py): it is the CPU path, FP8 calibration's path (it records amax |K|, |V|),
and the reference gemma4/fused.py's kernels are tested against.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from .layers import apply_rope, gelu_tanh, rope_row_tables, softcap_logits


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """layers.RMSNorm's maths on given weights (None: no scale)."""
    xf = x.float()
    out = xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return (out * w.float() if w is not None else out).to(x.dtype)


def add_rms_norm(y, res, wa, eps, scalar=None, wb=None):
    """(s, x): s = (res + norm_wa(y)) [* scalar], and x its norm with wb (s itself when wb is None)."""
    s = res + rms_norm(y, wa, eps)
    if scalar is not None:
        s = s * scalar
    return s, (rms_norm(s, wb, eps) if wb is not None else s)


class TorchOps:
    name = "unfused"
    serial = True  # no programmatic dependent launch (kernels/pdl.py)

    def prepare(self, model) -> None:
        """Nothing to prepare: the modules' own weights."""

    def launches(self, model, tokens: int):
        return contextlib.nullcontext()

    def prefetches(self) -> bool:
        """Whether this step takes prefetch hints (inside `launches`); never here."""
        return False

    def prefetch(self, *weights, limit=None) -> None:
        """A hint, ignored here."""

    def embedding(self, ids, w, scale: float):
        return F.embedding(ids, w) * scale

    rope_tables = staticmethod(rope_row_tables)

    def linear(self, x, w, scale=None, softcap=None):
        y = F.linear(x, w)
        if scale is not None:
            y = y * scale
        return y if softcap is None else softcap_logits(y, softcap)

    def gelu_mul(self, gate, up):
        return gelu_tanh(gate) * up

    def linear_gelu_mul(self, x, w, mul=None):
        """gelu_tanh(x @ Wg.T) * (x @ Wu.T) for w = [Wg; Wu] (mul None), else gelu_tanh(x @ w.T) * mul."""
        y = self.linear(x, w)
        if mul is None:
            i = y.shape[1] // 2
            return self.gelu_mul(y[:, :i], y[:, i:])
        return self.gelu_mul(y, mul)

    def rms_norm(self, x, w, eps):
        return rms_norm(x, w, eps)

    def linear_add_norm(self, x, w, res, wa, eps, scalar=None, w_b=None):
        """add_rms_norm(x @ w.T, res, ...): a projection whose one reader is the add-norm after it."""
        return self.add_rms_norm(self.linear(x, w), res, wa, eps, scalar, w_b)

    def add_rms_norm(self, y, res, wa, eps, scalar=None, w_b=None):
        return add_rms_norm(y, res, wa, eps, scalar, w_b)

    def mlp_add_norm(self, m, z, res, wa, eps, scalar=None, w_b=None):
        """add_rms_norm(mlp(m, z), res, ...): a dense MLP and the add-norm after it."""
        return self.linear_add_norm(self.mlp_hidden(m, z), m.down_proj.weight, res, wa, eps, scalar, w_b)

    def ple_add_norm(self, lay, x, ple, res, wa, eps, scalar=None, w_b=None):
        """add_rms_norm((gelu_tanh(x @ Wgate.T) * ple) @ Wproj.T, res, ...): the per-layer-input block."""
        p = self.linear_gelu_mul(x, lay.per_layer_input_gate.weight, ple)
        return self.linear_add_norm(p, lay.per_layer_projection.weight, res, wa, eps, scalar, w_b)

    def ready(self, x):
        return x

    def qkv(self, a, xn, cos, sin, ctx, g, params, cache_dtype):
        """The attention module's projections, norms and rope, one at a time; K/V written through the cache.
        q stays in the model dtype (a quant-query backend quantizes it itself)."""
        t = xn.shape[0]
        q = apply_rope(a.q_norm(a.q_proj(xn).view(t, a.n_heads, a.head_dim)), cos, sin)
        if not a.kv_shared:
            k_raw = a.k_proj(xn).view(t, a.n_kv, a.head_dim)
            v_raw = k_raw if a.v_proj is None else a.v_proj(xn).view(t, a.n_kv, a.head_dim)
            k = apply_rope(a.k_norm(k_raw), cos, sin)
            v = a.v_norm(v_raw)
            if ctx.kv_amax is not None:  # FP8 calibration
                ctx.kv_amax[a.layer] = (k.detach().abs().amax().float(), v.detach().abs().amax().float())
            g.cache.write(a.layer, k, v, g.slot_mapping, static=ctx.static)
        return q

    def mlp_hidden(self, m, z):
        """GeGLU's middle, before down_proj."""
        return gelu_tanh(m.gate_proj(z)) * m.up_proj(z)

    def mlp(self, m, z):
        return m.down_proj(self.mlp_hidden(m, z))


TORCH = TorchOps()
