"""The fused ops of the Gemma-4 forward (CUDA): gemma4/forward.py computes with these instead of gemma4/ops.py's
PyTorch ops, the same maths in fewer, larger kernels. Per layer:

    qkv  = xn @ [Wq; Wk; Wv]                  one GEMM (weights concatenated once, module weights become views)
    q    = qkv_norm_rope_write(qkv)           one kernel: q/k/v norms, rope, paged KV write (FP8 included),
                                              and q quantized where the backend takes FP8 q (quant-query)
    o    = attention(q, cache) @ Wo           the selected backend, one GEMM
    h, z = h + norm(o), norm'(h)              one kernel
    y    = gelu(z @ Wg) * (z @ Wu) @ Wd       two GEMMs ([Wg; Wu] concatenated) and one kernel; at 1 to 16
                                              rows the GELU*up is the first projection's epilogue
    x', xn' = (h + norm(y)) * s, norm''(x')   one kernel; norm'' is the next layer's input norm (or the
                                              final norm), so every layer starts from a normed input
    (E2B/E4B per-layer inputs: two GEMMs, a gelu*ple kernel (one row: the epilogue) and one more add-norm kernel)

Outside the layers: the token and per-layer-input embeddings are one gather-and-scale kernel each; the per-layer
inputs' norm, add and mix one norm kernel; both rope tables one kernel; at 1 to 16 rows the per-layer inputs' scale
and the logit softcap are the projections' epilogues (more rows: PyTorch's ops after cuBLAS). A one-token step: 3 kernels
where PyTorch took 13.

No parameter is cast per call (kernels widen bf16 weights in registers), nothing syncs with the host.
The fused regions come as hand-written Triton (kernels/) or the same regions
written with PyTorch ops and compiled with torch.compile (`CompiledOps`), measured against each
other in kselect/measurement/gemma4/fusion.py. The projections of a one-token step (batch-1 decode) run on
kernels/gemv.py under the Triton ops; of a 2- to 16-token step on kernels/skinny_gemm.py where the card's record
measured it faster than cuBLAS (kernels/skinny_configs.json, and kernels/skinny_step_configs.json's split-K configs
measured in the step); cuBLAS otherwise ("triton_cublas": cuBLAS always).
On SM90 the Triton kernels launch with programmatic dependent launch (kernels/pdl.py) where it measured
faster: one-token steps of a model with small layers, and on the H100 and the H200 steps of up to 16 tokens
(`pdl_step`); "triton_serial" launches plainly always.
MoE blocks run their modules under every ops; FP8 calibration (kv_amax) runs the PyTorch ops.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ..kernels.cards import card_name
from ..kernels.dtypes import is_fp8
from ..kernels.switches import switched
from .layers import apply_rope, gelu_tanh
from .ops import TORCH, TorchOps, add_rms_norm, rms_norm


# ---------------------------------------------------------------------------- weights, once
def _concat_linears(linears: list[nn.Linear]) -> torch.Tensor:
    """One [sum out, in] weight whose row blocks the modules' weights become views of (no extra memory)."""
    ws = [m.weight for m in linears]
    base = ws[0]
    rows = 0
    storage = base.untyped_storage().data_ptr()
    for w in ws:  # already aliased: consecutive row blocks of one buffer (adjacent allocations are not)
        if (w.untyped_storage().data_ptr() != storage or not w.is_contiguous()
                or w.data_ptr() != base.data_ptr() + rows * base.stride(0) * base.element_size()):
            break
        rows += w.shape[0]
    else:
        return torch.as_strided(base, (rows, base.shape[1]), (base.stride(0), 1))
    cat = torch.cat([w.detach() for w in ws])
    r = 0
    for m, w in zip(linears, ws):
        m.weight = nn.Parameter(cat[r:r + w.shape[0]], requires_grad=w.requires_grad)
        r += w.shape[0]
    return cat


@torch.no_grad()
def prepare(model) -> None:
    """Concatenate q/k/v and gate/up weights (idempotent; redone if the weights moved, e.g. `.to()`).
    Every forward calls it: the check is one key of weight addresses, not a walk over every layer
    (that walk was ~2 ms of host time per step, which an eager prefill step of E4B waits on)."""
    if getattr(model, "_fused_key", None) == _weights_key(model):
        return
    with torch.inference_mode(False):
        for layer in model.layers:
            a = layer.self_attn
            a.qkv_weight = _concat_linears(a.input_projections())
            layer.mlp.gate_up_weight = _concat_linears([layer.mlp.gate_proj, layer.mlp.up_proj])
    model._fused_key = _weights_key(model)


def _weights_key(model) -> tuple:
    """Where the first and last layers' weights live: it changes when prepare's views are gone (`.to()`)."""
    first, last = model.layers[0], model.layers[-1]
    return (first.self_attn.q_proj.weight.data_ptr(), last.self_attn.q_proj.weight.data_ptr(),
            last.mlp.up_proj.weight.data_ptr(), len(model.layers))


# ---------------------------------------------------------------------------- fused-region implementations
class FusedOps(TorchOps):
    """The regions gemma4/ops.py's TorchOps runs op by op, over the concatenated weights: one q/k/v GEMM and one
    norm-rope-KV-write kernel (`qkv_kernel`), one gate/up GEMM with GELU*up after it. Subclasses give the kernels."""

    serial = False  # launch with PDL where `pdl_step` says (kernels/pdl.py)

    def prepare(self, model) -> None:
        prepare(model)

    def launches(self, model, tokens: int):
        from ..kernels import pdl  # Triton: imported with the first fused step, not with the model

        return pdl.on() if not self.serial and pdl_step(model, tokens) else contextlib.nullcontext()

    def qkv(self, a, xn, cos, sin, ctx, g, params, cache_dtype):
        eps = a.q_norm.eps
        qkv = self.linear(xn, a.qkv_weight)
        # quant-query backends: q leaves the q/k/v kernel quantized (no separate quantize kernel a layer)
        qs = g.backend.query_scale(g.meta, params, cache_dtype)
        quant = dict(q_scale=qs, q_dtype=cache_dtype) if qs is not None else {}
        shared = a.kv_shared
        args = (qkv, a.n_heads, 0 if shared else a.n_kv, a.head_dim, a.q_norm.weight,
                None if shared else a.k_norm.weight, cos, sin, eps)
        kv = {}
        if not shared:
            kc, vc = g.cache.kv(a.layer)
            kv = dict(k_cache=kc, v_cache=vc, slot_mapping=g.slot_mapping, k_eq_v=a.v_proj is None)
        if QKV_IN_ATTENTION and qs is None and g.backend.takes_raw_qkv and not is_fp8(cache_dtype):
            from ..kernels.attn_qkv import RawQKV  # the attention kernel runs the q/k/v kernel's work

            return RawQKV(*args, **kv)
        if not shared:
            p = g.cache.layer_params(a.layer, a.window_left)
            kv.update(k_scale=p.k_scale, v_scale=p.v_scale)
        return self.qkv_kernel(*args, **kv, **quant)

    def mlp_hidden(self, m, z):
        return self.linear_gelu_mul(z, m.gate_up_weight)

    def mlp(self, m, z):
        return self.linear(self.mlp_hidden(m, z), m.down_proj.weight)


def _unit_columns(x, w) -> bool:
    return x.stride(-1) == 1 and w.stride(-1) == 1  # an AddNorm's rows (its y) are checked where it is made


# Which projections the Triton ops run on which kernel, by rows of x: one row on kernels/gemv.py; 2 to 16 rows on
# kernels/skinny_gemm.py for the shapes where the card's record measured it faster than cuBLAS (SKINNY_SHAPES
# "measured"; "all": every shape), else cuBLAS; more rows on cuBLAS. `projection_rows` changes it for a measurement
# (kselect/measurement/gemv_variants.py); a CUDA graph captured inside keeps the choice.
GEMV_ROWS, SKINNY_ROWS, SKINNY_SHAPES = (1, 1), (2, 16), "measured"
# FOLD_NORMS: at GEMV rows the add-norm before a projection runs in that GEMV's prologue
# (kernels/add_norm_prologue.py) instead of its own kernel. Off: on the H100 it removed 125 norm kernels a step and
# made the GEMVs 1.1 ms slower (every program rebuilds x; bench/results/h100/fold/). `fold_norms(True)` measures it.
FOLD_NORMS = False


def _switched(**values):
    """These module switches set inside, restored after (a CUDA graph captured inside keeps the choice)."""
    return switched(globals(), **values)


def fold_norms(on: bool):
    """FOLD_NORMS inside."""
    return _switched(FOLD_NORMS=on)


# TAIL_NORMS: at GEMV rows the add-norm after a projection (o_proj, down_proj, the per-layer projection) runs in that
# GEMV's last program (kernels/add_norm_tail.py) instead of its own kernel. Off: on the H100 E4B decoded 0.806x with it
# (126 norm kernels fewer, but each GEMV carrying one 8.2 us longer; bench/results/h100/kselect_triton/).
# `tail_norms(on)` sets it for a measurement.
TAIL_NORMS = False


def tail_norms(on: bool):
    """TAIL_NORMS inside."""
    return _switched(TAIL_NORMS=on)


# PLE_BLOCK: at one row the per-layer-input block (the gate, the projection, the add-norms before and after) runs as
# one kernel whose phases meet at a grid barrier (kernels/ple_block.py) instead of four kernels. Off: E4B's batch-1 step
# tied on the H100 (0.997x, 1.000x; bench/results/h100/ple_block/). `ple_block(on)` sets it.
PLE_BLOCK = False


def ple_block(on: bool):
    """PLE_BLOCK inside."""
    return _switched(PLE_BLOCK=on)


# QKV_IN_ATTENTION: where the group's backend takes raw q/k/v (kselect's Triton kernel: `takes_raw_qkv`), a 16-bit
# cache and no quantized q, the q/k/v norms, rope and KV write run inside the attention kernel at one new token a
# sequence (kernels/attn_qkv.py), one kernel a layer fewer. Off: in E4B's step on the H100 the attention grew by more
# than the kernel it absorbed, 0.993x at batch 1 and 16 (bench/results/h100/attn_qkv/). `qkv_in_attention(on)` sets it.
QKV_IN_ATTENTION = False


def qkv_in_attention(on: bool):
    """QKV_IN_ATTENTION inside."""
    return _switched(QKV_IN_ATTENTION=on)


# NORM_FOLD: at one row an add-norm with a next norm (before q/k/v and gate/up) is folded into the sums of the
# projection that reads it (kernels/gemv_fold.py, weights W * w_b made once a model) instead of its own kernel; results
# differ from the norm kernel's by about one rounding of x. Off: E4B's batch-1 step decoded 0.936x with it on the H100
# (bench/results/h100/norm_fold/). `norm_fold(on)` sets it.
NORM_FOLD = False


def norm_fold(on: bool):
    """NORM_FOLD inside."""
    return _switched(NORM_FOLD=on)


# GEMV_TMA: one-row projections on kernels/gemv_tma.py (W through TMA, several chunks in flight a program) instead of
# kernels/gemv.py, where the operands fit it. Off: E4B's batch-1 step decoded 0.86x (0.89x tuned) with it on the H100
# (bench/results/h100/gemv_tma/); `gemv_tma(on)` sets it for a measurement.
GEMV_TMA = False


def gemv_tma(on: bool):
    """GEMV_TMA inside."""
    return _switched(GEMV_TMA=on)


# PREFETCH: inside a CUDA graph of a decode step (up to PREFETCH_MAX_ROWS rows), the weights the next projections read
# go to L2 on a side stream while latency-bound kernels (attention, norms) leave the memory idle (kernels/l2_prefetch.py;
# forward.py says what and when). Off: on the H100 E4B decoded 0.976x (B1) and 0.984x (B16) with it; the projections
# gained less than attention and the norms lost beside the prefetches (bench/results/h100/README.md, prefetch/).
# `prefetching(on)` sets it for a measurement. Each weight's first PREFETCH_MAX_BYTES
# at most: a third of an H100's or H200's 50 MB L2, so what is brought in is not evicted before it is read (31B's
# o_proj alone is 88 MB; E4B's largest hint, q/k/v, 15.7 MB).
PREFETCH, PREFETCH_MAX_ROWS, PREFETCH_MAX_BYTES = False, 16, 16 << 20


def prefetching(on: bool):
    """PREFETCH inside."""
    return _switched(PREFETCH=on)


# GATED_PAIR: at GEMV rows a gated projection pair (the MLP's gate/up and down; the per-layer-input gate and projection)
# runs as one kernel (kernels/gated_pair.py) that adds into an fp32 row, which the add-norm after it reads and zeros.
# "n": the second projection read in its own [N, I] layout; "t": from a transposed copy made once per model (`prepare`;
# E4B: 2.2 GB more). Off by default; `gated_pair(mode)` sets it for a measurement.
GATED_PAIR = False


def gated_pair(mode):
    """GATED_PAIR inside (False, "n" or "t")."""
    if mode not in (False, "n", "t"):
        raise ValueError(f"gated_pair mode must be False, 'n' or 't', got {mode!r}")
    return _switched(GATED_PAIR=mode)


def projection_rows(gemv_rows, skinny_rows, skinny_shapes="measured"):
    """GEMV_ROWS and SKINNY_ROWS ((lo, hi) inclusive, or None: that kernel never) and SKINNY_SHAPES inside."""
    return _switched(GEMV_ROWS=gemv_rows, SKINNY_ROWS=skinny_rows, SKINNY_SHAPES=skinny_shapes)


def _within(rows, m: int) -> bool:
    return bool(rows) and rows[0] <= m <= rows[1]


def _kernel_for(x, w, measured_faster) -> str:
    """"gemv", "skinny" or "cublas" for x @ w.T; measured_faster(x, n, k): kernels/skinny_gemm.py's card table."""
    m = x.shape[0]
    if not _unit_columns(x, w):
        return "cublas"
    if _within(GEMV_ROWS, m):
        return "gemv"
    if _within(SKINNY_ROWS, m) and x.dtype == w.dtype and (
            SKINNY_SHAPES == "all" or measured_faster(x, *w.shape)):
        return "skinny"
    return "cublas"


class TritonOps(FusedOps):
    name = "triton"
    folds = True  # add-norms into the GEMV's prologue at GEMV rows where FOLD_NORMS is on

    def __init__(self):
        from ..kernels import (add_norm_prologue, add_norm_tail, embedding, gated_pair, gelu_mul, gemv, gemv_fold, gemv_tma,
                               l2_prefetch, ple_block, qkv_rope, rms_norm, rope_tables, skinny_gemm)

        self._l2 = l2_prefetch
        self.embedding = embedding.embedding_scaled
        self.rope_tables = rope_tables.rope_tables
        self.rms_norm = rms_norm.rms_norm
        self._add_rms_norm = rms_norm.add_rms_norm
        self._pending, self._fits = add_norm_prologue.AddNorm, add_norm_prologue.fits
        self._tail = add_norm_tail.AddNormTail
        self.gelu_mul = gelu_mul.gelu_tanh_mul
        self.qkv_kernel = qkv_rope.qkv_norm_rope_write
        self._gemv_plain, self._gemv_gelu_mul_plain = gemv.gemv, gemv.gemv_gelu_mul
        self._tma = gemv_tma
        self._skinny = skinny_gemm.skinny_gemm
        self._gated_pair = gated_pair.gated_pair
        self._ple = ple_block
        self._fold = gemv_fold
        self._lazy = (self._pending, gemv_fold.FoldedNorm)  # an add-norm a later kernel computes
        self._wfold: dict[tuple, torch.Tensor] = {}  # (W, w_b) -> W * w_b, made by an eager step (NORM_FOLD)
        self._accs: dict[tuple, torch.Tensor] = {}  # GATED_PAIR's fp32 rows, zeros between uses
        self._skinny_gelu_mul = skinny_gemm.skinny_gemm_gelu_mul
        self._measured_faster = skinny_gemm.measured_faster
        self._side = None  # the side stream prefetches go to, inside a step that prefetches (`launches`)
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def launches(self, model, tokens: int):
        """PDL where `pdl_step` says; inside a CUDA graph capture of a step of up to PREFETCH_MAX_ROWS rows (PREFETCH
        on), a side stream for `prefetch`, joined when the step ends (a capture must end on its own stream). Eager steps
        never prefetch: a decode step run eagerly is host-bound, and a launch more would only add to that."""
        stack = contextlib.ExitStack()
        stack.enter_context(super().launches(model, tokens))
        if PREFETCH and tokens <= PREFETCH_MAX_ROWS and torch.cuda.is_available() \
                and torch.cuda.is_current_stream_capturing():
            stack.enter_context(self._side_stream())
        return stack

    @contextlib.contextmanager
    def _side_stream(self):
        main = torch.cuda.current_stream()
        if main.device not in self._streams:
            self._streams[main.device] = torch.cuda.Stream(main.device)
        side = self._streams[main.device]
        self._side = side
        try:
            yield
        finally:
            self._side = None
            main.wait_stream(side)

    def prefetches(self) -> bool:
        return self._side is not None

    def prefetch(self, *weights, limit=None) -> None:
        """Inside a step that prefetches (`launches`): the weights' bytes (each one's first `limit` bytes, at most
        PREFETCH_MAX_BYTES) into L2 on the side stream, after what the step has launched so far; adjacent weights are
        one launch."""
        if self._side is None or not weights or not self._l2.supported(weights[0]):
            return
        self._side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._side):
            self._l2.prefetch_l2(self._l2.byte_ranges(weights, min(limit or PREFETCH_MAX_BYTES, PREFETCH_MAX_BYTES)))

    def prepare(self, model) -> None:
        super().prepare(model)
        if GATED_PAIR == "t":
            _transposed_second_projections(model)

    def mlp_add_norm(self, m, z, res, wa, eps, scalar=None, w_b=None):
        """As TorchOps'; at GEMV rows with GATED_PAIR on, one kernel for both projections (kernels/gated_pair.py).
        With PLE_BLOCK at one row, the add-norm before a per-layer-input block (no scalar, no next norm: the forward's
        only such call) is pending: the block computes it (`ple_add_norm`), anything else through `ready`."""
        if self._pairs(z, m.gate_up_weight):
            acc = self._pair(z, m.gate_up_weight, m.down_proj.weight, getattr(m, "down_t", None), None)
            return self._acc_norm(acc, res, wa, eps, scalar, w_b)
        if PLE_BLOCK and scalar is None and w_b is None and self._rows(z).shape[0] == 1:
            y = self.linear(self.mlp_hidden(m, z), m.down_proj.weight)
            if self._fits(y, res):
                s = torch.empty_like(y, memory_format=torch.contiguous_format)
                return s, self._pending(y, res, wa, eps, None, None, s)
            return self.add_rms_norm(y, res, wa, eps)
        return super().mlp_add_norm(m, z, res, wa, eps, scalar, w_b)

    def ple_add_norm(self, lay, x, ple, res, wa, eps, scalar=None, w_b=None):
        """As TorchOps'; at GEMV rows with GATED_PAIR on, one kernel for the gate and the projection; at one row with
        PLE_BLOCK on, one kernel for the block and the add-norms around it (kernels/ple_block.py)."""
        gate = lay.per_layer_input_gate.weight
        if PLE_BLOCK:
            done = self._block(x, ple, gate, lay.per_layer_projection.weight, res, wa, eps, scalar, w_b)
            if done is not None:
                return done
        if self._pairs(x, gate) and ple.stride(-1) == 1:
            acc = self._pair(x, gate, lay.per_layer_projection.weight, getattr(lay, "ple_proj_t", None), ple)
            return self._acc_norm(acc, res, wa, eps, scalar, w_b)
        return super().ple_add_norm(lay, x, ple, res, wa, eps, scalar, w_b)

    def _block(self, x, ple, gate, proj, res, wa, eps, scalar, w_b):
        """The block on kernels/ple_block.py where it fits: x a tensor, or the add-norm pending from `mlp_add_norm`
        (its s the block's residual, its eps the block's); None elsewhere."""
        pre = None
        if isinstance(x, self._pending):
            if x.out is not res or x.scalar is not None or x.w_b is not None or x.eps != eps:
                return None
            pre = (x.y, x.res, x.w_a, x.out)
        if not self._ple.fits(x.y if pre else x, gate, proj, ple) or (pre is None and res.shape != x.shape):
            return None
        return self._ple.ple_block(None if pre else x, ple, gate, proj, res, wa, eps, scalar, w_b, pre=pre)

    def _pairs(self, x, w) -> bool:
        return bool(GATED_PAIR) and not isinstance(x, self._lazy) and \
            _kernel_for(x, w, self._measured_faster) == "gemv"

    def _pair(self, x, w, wd, wd_t, mul):
        if GATED_PAIR == "t" and wd_t is None:
            raise RuntimeError("gated_pair 't' has no transposed copy: prepare(model) makes them")
        n = wd.shape[0]
        key = (x.device, n)
        if key not in self._accs:
            if x.is_cuda and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("gated_pair's accumulator is made by an eager step before a capture")
            self._accs[key] = torch.zeros(1, n, dtype=torch.float32, device=x.device)
        t = GATED_PAIR == "t"
        return self._gated_pair(x, w, wd_t if t else wd, self._accs[key], mul, down_t=t)

    def _acc_norm(self, acc, res, wa, eps, scalar, w_b):
        s, n = self._add_rms_norm(acc, res, wa, eps, scalar, w_b, zero_y=True)
        return s, (s if n is None else n)

    def add_rms_norm(self, y, res, wa, eps, scalar=None, w_b=None):
        """(s, x) as TorchOps'. At GEMV rows (FOLD_NORMS) x is pending: the GEMV that reads it computes the add-norm
        in its prologue and writes s; `ready` computes it where anything else reads it."""
        if self.folds and FOLD_NORMS and _within(GEMV_ROWS, y.shape[0]) and self._fits(y, res):
            s = torch.empty_like(y, memory_format=torch.contiguous_format)
            return s, self._pending(y, res, wa, eps, scalar, w_b, s)
        if self.folds and NORM_FOLD and self._fold.FoldedNorm.fits(y, res, w_b):
            s = torch.empty_like(y, memory_format=torch.contiguous_format)
            return s, self._fold.FoldedNorm(y, res, wa, eps, scalar, w_b, s)
        s, n = self._add_rms_norm(y, res, wa, eps, scalar, w_b)
        return s, (s if n is None else n)

    def linear_add_norm(self, x, w, res, wa, eps, scalar=None, w_b=None):
        """(s, x') as add_rms_norm(linear(x, w), ...); at GEMV rows with TAIL_NORMS on, one kernel: the GEMV's last
        program computes the add-norm (kernels/add_norm_tail.py)."""
        if (TAIL_NORMS and not isinstance(x, self._pending) and _kernel_for(x, w, self._measured_faster) == "gemv"
                and self._tail.fits(res, x.shape[0], w.shape[0])):
            s = torch.empty(res.shape, dtype=res.dtype, device=res.device)
            n = torch.empty_like(s) if w_b is not None else None
            self._gemv(x, w, tail=self._tail(res, wa, eps, scalar, w_b, s, n))
            return s, (s if n is None else n)
        return self.add_rms_norm(self.linear(x, w), res, wa, eps, scalar, w_b)

    def _gemv(self, x, w, **kw):
        """One row's projection: on kernels/gemv_tma.py where GEMV_TMA is on and it fits (no add-norm before or after
        it), else kernels/gemv.py."""
        if GEMV_TMA and not kw.get("tail") and not isinstance(x, self._pending) and self._tma.fits(x, w):
            return self._tma.gemv_tma(x, w, **kw)
        return self._gemv_plain(x, w, **kw)

    def _gemv_gelu_mul(self, x, w, mul=None):
        if GEMV_TMA and not isinstance(x, self._pending) and self._tma.fits(x, w):
            return self._tma.gemv_tma_gelu_mul(x, w, mul)
        return self._gemv_gelu_mul_plain(x, w, mul)

    def ready(self, x):
        """x as a tensor: a pending or folded add-norm computed by the norm kernel (s into its `out`)."""
        if not isinstance(x, self._lazy):
            return x
        s, n = self._add_rms_norm(x.y, x.res, x.w_a, x.eps, x.scalar, x.w_b, out=x.out)
        return s if n is None else n

    def linear(self, x, w, scale=None, softcap=None):
        """x @ w.T: a decode step's few rows on the GEMV (one row) or the skinny GEMM (2 to 16) with scale and
        softcap in the epilogue; more rows on cuBLAS's GEMMs then PyTorch's ops."""
        kernel = _kernel_for(self._rows(x), w, self._measured_faster)
        if isinstance(x, self._fold.FoldedNorm):
            if kernel == "gemv" and scale is None and softcap is None:
                return self._fold.gemv_fold(x, self._folded(w, x.w_b))
            x = self.ready(x)
        if kernel == "gemv":
            return self._gemv(x, w, scale=scale, softcap=softcap)
        if kernel == "skinny":
            return self._skinny(self.ready(x), w, scale=scale, softcap=softcap)
        return super().linear(self.ready(x), w, scale, softcap)

    def linear_gelu_mul(self, x, w, mul=None):
        """A decode step's few rows: GELU*up in the projection's epilogue (one kernel); more rows: the GEMM, then
        the kernel."""
        kernel = _kernel_for(self._rows(x), w, self._measured_faster)
        if isinstance(x, self._fold.FoldedNorm):
            if kernel == "gemv" and mul is None:
                return self._fold.gemv_fold(x, self._folded(w, x.w_b), paired=True)
            x = self.ready(x)
        if kernel != "cublas" and (mul is None or mul.stride(-1) == 1):
            return getattr(self, f"_{kernel}_gelu_mul")(x if kernel == "gemv" else self.ready(x), w, mul)
        return super().linear_gelu_mul(self.ready(x), w, mul)

    def _rows(self, x):
        """The rows a projection of x reads: a pending add-norm's y (its s and x have y's shape and strides)."""
        return x.y if isinstance(x, self._lazy) else x

    def _folded(self, w, w_b):
        """W * w_b (kernels/gemv_fold.py), made once per weight placement by an eager step (a capture cannot)."""
        key = (w.data_ptr(), tuple(w.shape), w_b.data_ptr())
        if key not in self._wfold:
            if w.is_cuda and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("norm_fold's folded weights are made by an eager step before a capture")
            self._wfold[key] = self._fold.folded_weight(w, w_b)
        return self._wfold[key]


@torch.no_grad()
def _transposed_second_projections(model) -> None:
    """GATED_PAIR "t": each dense layer's down_proj and per-layer projection weights also as contiguous [I, N] copies
    (`mlp.down_t`, `ple_proj_t`), made once per placement of the weights (outside a capture)."""
    key = _weights_key(model)
    if getattr(model, "_pair_t_key", None) == key:
        return
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("gated_pair 't' copies are made by an eager step before a capture")
    for lay in model.layers:
        if not lay.moe:
            lay.mlp.down_t = lay.mlp.down_proj.weight.detach().t().contiguous()
        if lay.ple_dim:
            lay.ple_proj_t = lay.per_layer_projection.weight.detach().t().contiguous()
    model._pair_t_key = key


class TritonSerialOps(TritonOps):
    """The Triton ops launched without programmatic dependent launch: PDL's baseline."""

    name = "triton_serial"
    serial = True


class TritonCublasOps(TritonOps):
    """The Triton fused regions with every projection on cuBLAS: the GEMV's baseline."""

    name = "triton_cublas"
    folds = False
    linear = TorchOps.linear
    linear_gelu_mul = TorchOps.linear_gelu_mul
    linear_add_norm = TorchOps.linear_add_norm
    mlp_add_norm = TorchOps.mlp_add_norm
    ple_add_norm = TorchOps.ple_add_norm


def _t_qkv(qkv, hq, hkv, d, qw, kw, cos, sin, eps, k_eq_v):
    """The q/k/v region as PyTorch ops (compiled by CompiledOps): norms and rope of the concatenated projection."""
    t = qkv.shape[0]
    q = apply_rope(rms_norm(qkv[:, :hq * d].view(t, hq, d), qw, eps), cos, sin)
    if not hkv:
        return q, None, None
    k_raw = qkv[:, hq * d:(hq + hkv) * d].view(t, hkv, d)
    v_raw = k_raw if k_eq_v else qkv[:, (hq + hkv) * d:].view(t, hkv, d)
    return q, apply_rope(rms_norm(k_raw, kw, eps), cos, sin), rms_norm(v_raw, None, eps)


def _gelu_mul(gate, up):
    return gelu_tanh(gate) * up


class CompiledOps(FusedOps):
    """The fused regions as PyTorch ops under torch.compile (inductor generates the kernels).
    The KV write after the compiled norm+rope is kernels/kv_write (one more kernel per KV layer)."""

    name = "compile"

    def __init__(self):
        import torch._dynamo

        from ..kernels.cache_ops import quantize_query
        from ..kernels.kv_write import write_kv_triton

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        if hasattr(torch._dynamo.config, "recompile_limit"):
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
        c = lambda f: torch.compile(f, fullgraph=True, dynamic=False)  # noqa: E731
        self.rms_norm = c(rms_norm)
        self._add_norm = c(add_rms_norm)
        self.gelu_mul = c(_gelu_mul)
        self._qkv = c(_t_qkv)
        self._write = write_kv_triton
        self._quant_q = quantize_query

    def add_rms_norm(self, y, res, wa, eps, scalar=None, w_b=None):
        return self._add_norm(y, res, wa, eps, scalar, w_b)

    def qkv_kernel(self, qkv, hq, hkv, d, qw, kw, cos, sin, eps, k_cache=None, v_cache=None, slot_mapping=None,
                   k_scale=None, v_scale=None, k_eq_v=False, q_scale=None, q_dtype=None):
        q, k, v = self._qkv(qkv, hq, hkv if k_cache is not None else 0, d, qw, kw, cos, sin, eps, k_eq_v)
        if k_cache is not None:
            self._write(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        return q if q_scale is None else self._quant_q(q, q_scale, q_dtype)


_OPS: dict[str, object] = {}


def ops_for(name: str):
    """The ops of a compute mode (gemma4/model.py COMPUTE_MODES, "auto" resolved): one instance per mode."""
    if name == "unfused":
        return TORCH
    if name not in _OPS:
        _OPS[name] = {"triton": TritonOps, "triton_serial": TritonSerialOps, "triton_cublas": TritonCublasOps,
                      "compile": CompiledOps}[name]()
    return _OPS[name]


# PDL measured on the H200, same runs (bench/results/h200/pdl/): one-token steps of E4B (0.19 GB of weights a layer)
# 3.81 -> 3.39 ms; 31B's (0.96 GB a layer) 16.68 -> 17.07 ms; 16-token steps 5.25 -> 5.38 ms (E4B), 19.84 -> 19.80
# (31B). Short kernels gain the launch and ramp PDL hides; the cause of 31B's loss is not measured yet.
PDL_MAX_LAYER_BYTES = 0.5e9
# PDL_MAX_TOKENS: the widest step that launches with PDL. None: the card's (PDL_TOKENS_BY_CARD), else one. 16-token
# steps measured 0.975x with PDL on the H200 (above) and 1.014x, a tie, on the H100 (bench/results/h100/b16_step/);
# on the H100 with kernels/skinny_gemm.py's W prefetch and kernels/triton_paged.py's batch-16 launch
# (SMALL_WIDE_BY_CARD) they took E4B's batch-16 step 1.047x and 1.045x in two calls (bench/results/h100/b16_rule/),
# and on the H200 1.105x (bench/results/h200/b16_rule/).
# `pdl_tokens(n)` sets it for a measurement (kselect/measurement/gemv_variants.py `pdl_b16`).
PDL_MAX_TOKENS = None
PDL_TOKENS_BY_CARD = {"NVIDIA H100 80GB HBM3": 16, "NVIDIA H200": 16}


def pdl_tokens(n: int):
    """PDL_MAX_TOKENS inside."""
    return _switched(PDL_MAX_TOKENS=n)


def layer_bytes(model) -> float:
    """Mean weight bytes of one decoder layer (kept on the model until its weights move, e.g. `.to()`)."""
    key = _weights_key(model)
    if getattr(model, "_layer_bytes_key", None) != key:
        total = sum(p.numel() * p.element_size() for p in model.layers.parameters())
        model._layer_bytes, model._layer_bytes_key = total / len(model.layers), key
    return model._layer_bytes


def pdl_max_tokens(device: torch.device) -> int:
    """The widest step launched with PDL on `device`: PDL_MAX_TOKENS where set, else its card's, else one."""
    if PDL_MAX_TOKENS is not None:
        return PDL_MAX_TOKENS
    return PDL_TOKENS_BY_CARD.get(card_name(device), 1)


def pdl_step(model, tokens: int) -> bool:
    """Whether a step of `tokens` rows launches its Triton kernels with PDL: steps of up to pdl_max_tokens rows (one,
    16 on the cards of PDL_TOKENS_BY_CARD) of a model whose layers hold at most PDL_MAX_LAYER_BYTES of weights, where
    it measured faster; plain elsewhere."""
    device = model.layers[0].self_attn.q_proj.weight.device
    return tokens <= pdl_max_tokens(device) and layer_bytes(model) <= PDL_MAX_LAYER_BYTES
