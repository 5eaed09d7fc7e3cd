"""q/k/v's norms and rope inside the attention kernel, at one new token a sequence: one kernel a layer fewer.

After the fused q/k/v projection, kernels/qkv_rope.py's kernel norms and rotates q, k and v, writes k and v to the
paged cache, and the attention kernel then reads q and the cache. A decode step's attention (every sequence one
new token) can do that work itself (kernels/triton_paged.py with a `RawQKV` for q):
- every program norms and rotates its query rows from the raw q columns (`query_rows`), where it read q;
- one more split a (sequence, kv head), the last, makes the new token's k and v (`new_row`), writes them to the
  cache as the q/k/v kernel would, and stores that one key's partial from its registers (`new_key_split`); the
  other splits share the tiles and leave that position out (their read of it could come before the write), and the
  merge joins the partials as it joins any split's.
q, k and v round where the q/k/v kernel rounds (kernels/qkv_rope.py `norm_rope`), so q and the cache have its bits;
the output differs from the two kernels' only by the new key's score being summed elementwise, not in a tile's dot,
and by which split's partial holds it. KV-shared layers make only q. FP8 caches and quantized queries keep the q/k/v
kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .dtypes import is_fp8
from .kv_write import store_kv_row
from .qkv_rope import norm_rope, qkv_norm_rope_write


@dataclass(frozen=True)
class RawQKV:
    """qkv_norm_rope_write's arguments, not yet run: the attention computes q (and k, v) from them, or `ready()`
    runs the q/k/v kernel and gives q, for any kernel that cannot."""
    qkv: torch.Tensor
    hq: int
    hkv: int
    d: int
    q_weight: torch.Tensor
    k_weight: torch.Tensor | None
    cos: torch.Tensor
    sin: torch.Tensor
    eps: float
    k_cache: torch.Tensor | None = None
    v_cache: torch.Tensor | None = None
    slot_mapping: torch.Tensor | None = None
    k_eq_v: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return self.qkv.dtype

    @property
    def device(self) -> torch.device:
        return self.qkv.device

    def ready(self) -> torch.Tensor:
        """q [T, hq, d], k and v written: the q/k/v kernel."""
        return qkv_norm_rope_write(self.qkv, self.hq, self.hkv if self.k_cache is not None else 0, self.d,
                                   self.q_weight, self.k_weight, self.cos, self.sin, self.eps, self.k_cache,
                                   self.v_cache, self.slot_mapping, k_eq_v=self.k_eq_v)

    def fits(self, max_q: int, k_cache: torch.Tensor) -> bool:
        """The attention can take it: one new token a sequence, a power-of-two head dim, 16-bit caches, unit column
        strides (else `ready()`)."""
        caches = (k_cache,) + ((self.k_cache, self.v_cache) if self.k_cache is not None else ())
        return (max_q == 1 and self.d & (self.d - 1) == 0 and not any(is_fp8(c.dtype) for c in caches)
                and self.qkv.stride(-1) == 1 and self.cos.stride(-1) == 1 and self.cos.stride(0) == self.sin.stride(0)
                and self.sin.stride(-1) == 1)

    def args(self) -> dict:
        """The kernel's arguments for it (kernels/triton_paged.py `_attn_fwd`)."""
        kv = self.k_cache is not None
        v_col = (self.hq if self.k_eq_v else self.hq + self.hkv) * self.d
        return dict(qw_ptr=self.q_weight, kw_ptr=self.k_weight if kv else self.q_weight, cos_ptr=self.cos,
                    sin_ptr=self.sin, slot_ptr=self.slot_mapping if kv else self.cos,
                    kcw_ptr=self.k_cache if kv else self.qkv, vcw_ptr=self.v_cache if kv else self.qkv,
                    stride_cs=self.cos.stride(0), v_col=v_col, eps=float(self.eps), QKV=True, NEW_KV=kv)


@triton.jit
def group_q(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_start, kvh, stride_qt, stride_qh, stride_cs, eps, G: tl.constexpr,
            G_PAD: tl.constexpr, D: tl.constexpr):
    """Token q_start's G_PAD query heads of kv head kvh's group [G_PAD, D], normed and rotated from the raw q columns,
    fp32 values rounded to q's dtype; heads past the group repeat its first (in bounds; masked later)."""
    g = tl.arange(0, G_PAD)
    h = kvh * G + tl.where(g < G, g, 0)
    cols = tl.arange(0, D)[None, :] + 0 * h[:, None]  # [G_PAD, D]: the weight and rope loads in the rows' layout
    return norm_rope(q_ptr + q_start * stride_qt + h[:, None] * stride_qh, q_start, qw_ptr, cos_ptr, sin_ptr,
                     stride_cs, cols, eps, q_ptr, D, True, True)


@triton.jit
def query_rows(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_start, kvh, stride_qt, stride_qh, stride_cs, eps, G: tl.constexpr,
               G_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, D: tl.constexpr):
    """A program's query rows [BLOCK_Q * G_PAD, D] (row r: token r // G_PAD, head r % G_PAD of the group). At one new
    token a sequence only token q_start's rows count: its heads (`group_q`) are made once and repeated for the other
    tokens' rows, which are masked later, as the zeros they replace."""
    q = group_q(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_start, kvh, stride_qt, stride_qh, stride_cs, eps, G, G_PAD, D)
    return tl.reshape(tl.broadcast_to(q[None, :, :], (BLOCK_Q, G_PAD, D)), (BLOCK_Q * G_PAD, D))


@triton.jit
def new_row(q_ptr, kw_ptr, cos_ptr, sin_ptr, slot_ptr, kcw_ptr, vcw_ptr, q_start, kvh, hkv, hq, d, stride_qt,
            stride_cs, v_col, eps, D: tl.constexpr):
    """The new token's k (normed, rotated) and v (normed) of kv head kvh, written to the caches at its slot (< 0:
    padding, not written) as kernels/qkv_rope.py writes them; returned in the cache dtype."""
    row = q_ptr + q_start * stride_qt
    k = norm_rope(row + (hq + kvh) * D, q_start, kw_ptr, cos_ptr, sin_ptr, stride_cs, d, eps, q_ptr, D, True, True)
    v = norm_rope(row + v_col + kvh * D, q_start, kw_ptr, cos_ptr, sin_ptr, stride_cs, d, eps, q_ptr, D, False, False)
    slot = tl.load(slot_ptr + q_start)
    ok = d < D
    store_kv_row(kcw_ptr, kcw_ptr, slot, kvh, hkv, k, d, ok, D, False, False, 0.0)
    store_kv_row(vcw_ptr, vcw_ptr, slot, kvh, hkv, v, d, ok, D, False, False, 0.0)
    dt = kcw_ptr.dtype.element_ty
    return k.to(dt), v.to(dt)


@triton.jit
def new_key_split(q_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, slot_ptr, kcw_ptr, vcw_ptr, ws_acc_ptr, ws_ml_ptr, q_start,
                  q_len, kvh, hq, split, num_splits, sm_scale_log2, stride_qt, stride_qh, stride_cs, v_col, eps,
                  G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """The last split's program: the new token's k and v made and written (`new_row`), and its key's partial for the
    group's query rows, as a split holding that one key stores it (m = the score, l = 1, acc = v: p = 1 exactly)."""
    if q_len == 1:
        g = tl.arange(0, G_PAD)
        d = tl.arange(0, D)
        q = group_q(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_start, kvh, stride_qt, stride_qh, stride_cs, eps, G, G_PAD, D)
        k, v = new_row(q_ptr, kw_ptr, cos_ptr, sin_ptr, slot_ptr, kcw_ptr, vcw_ptr, q_start, kvh, hq // G, hq, d,
                       stride_qt, stride_cs, v_col, eps, D)
        s = tl.sum(q.to(DOT_DTYPE).to(tl.float32) * k.to(tl.float32)[None, :], axis=1) * sm_scale_log2
        ok = g < G
        base = (q_start * num_splits + split) * hq + kvh * G + g
        tl.store(ws_acc_ptr + base[:, None] * D + d[None, :], tl.broadcast_to(v.to(tl.float32)[None, :], (G_PAD, D)),
                 mask=ok[:, None])
        tl.store(ws_ml_ptr + base * 2, s, mask=ok)
        tl.store(ws_ml_ptr + base * 2 + 1, tl.full([G_PAD], 1.0, tl.float32), mask=ok)
