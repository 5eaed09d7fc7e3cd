"""Pure-PyTorch paged attention: the numerical oracle for every kernel and the CPU backend.

Math is fp32. One gathered, masked matmul per sequence (no per-token loop), so a tiny model
runs on CPU at a usable speed. Semantics (shared by all backends, see backends/base.py):

- q [total_q, Hq, D]; caches [num_blocks, block_size, Hkv, D]; Hq % Hkv == 0 (GQA).
- FP8 q/k/v are dequantized as stored.float() * descale; a descale is an fp32 scalar
  (0-d or [1]) or [B, Hkv] (per sequence and kv head; q_descale is per kv head too).
- Query j of sequence i sits at seqused_k[i] - qlen_i + j, unless q_positions is given.
- Key kp is visible to query qp iff kp < seqused_k[i], window_ok, and (kp <= qp, or both in
  one mm_prefix span, or not causal); window_ok = qp - kp <= window_left (or window_left < 0): the
  window bounds the past side only, so a span query sees its span's later keys however far ahead, as
  HF Gemma-4's sliding mask AND(kv > q - W, OR(causal, blockwise)) and vLLM's unified_attention with
  mm_prefix_clamp_sliding_window do.
- sinks [Hq] add exp(sink) to the softmax denominator (no value row).
- softcap > 0 bounds each scaled logit s to softcap * tanh(s / softcap) (vLLM's logits_soft_cap).
- A row with nothing visible outputs zeros.
"""

from __future__ import annotations

import torch

from .dtypes import FP8_DTYPES, is_fp8  # noqa: F401 - re-exported


def descale_rows(descale: torch.Tensor | None, batch: int, hkv: int, device) -> torch.Tensor:
    """Any accepted descale form -> fp32 [B, Hkv] (ones when None)."""
    if descale is None:
        return torch.ones(batch, hkv, dtype=torch.float32, device=device)
    d = descale.to(device=device, dtype=torch.float32)
    if d.numel() == 1:
        return d.reshape(1, 1).expand(batch, hkv)
    if d.shape == (batch, hkv):
        return d
    raise ValueError(f"descale must be a scalar or [B={batch}, Hkv={hkv}], got {tuple(d.shape)}")


def visibility_mask(q_pos: torch.Tensor, kv_len: int, *, causal: bool, window_left: int,
                    spans: torch.Tensor | None) -> torch.Tensor:
    """[qlen, kv_len] bool: which keys each query may attend to."""
    kp = torch.arange(kv_len, device=q_pos.device)[None, :]
    qp = q_pos[:, None]
    ok = torch.ones(q_pos.numel(), kv_len, dtype=torch.bool, device=q_pos.device)
    if window_left >= 0:
        ok &= qp - kp <= window_left
    if causal:
        order = kp <= qp
        if spans is not None:
            for start, end in spans.tolist():
                if start < 0:
                    continue
                order |= (qp >= start) & (qp < end) & (kp >= start) & (kp < end)
        ok &= order
    return ok


def paged_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, softmax_scale, *,
                    causal=True, window_left=-1, mm_prefix=None, sinks=None,
                    q_descale=None, k_descale=None, v_descale=None, q_positions=None, out_dtype=None, softcap=0.0):
    total_q, hq, d = q.shape
    _, block_size, hkv, dv = v_cache.shape
    if hq % hkv:
        raise ValueError(f"num q heads {hq} is not a multiple of num kv heads {hkv}")
    g = hq // hkv
    if out_dtype is None:
        out_dtype = torch.bfloat16 if is_fp8(q.dtype) else q.dtype
    batch = seqused_k.numel()
    dev = q.device
    cu = cu_seqlens_q.tolist()
    lens = seqused_k.tolist()
    qd = descale_rows(q_descale, batch, hkv, dev)
    kd = descale_rows(k_descale, batch, hkv, dev)
    vd = descale_rows(v_descale, batch, hkv, dev)
    out = torch.zeros(total_q, hq, dv, dtype=torch.float32, device=dev)
    sink = None if sinks is None else sinks.float().reshape(hkv, g, 1)

    for i in range(batch):
        q0, q1, kv_len = cu[i], cu[i + 1], int(lens[i])
        qlen = q1 - q0
        if qlen == 0 or kv_len == 0:
            continue
        nblk = -(-kv_len // block_size)
        blocks = block_table[i, :nblk].long()
        k = k_cache[blocks].reshape(-1, hkv, d)[:kv_len].float() * kd[i].view(1, hkv, 1)
        v = v_cache[blocks].reshape(-1, hkv, dv)[:kv_len].float() * vd[i].view(1, hkv, 1)
        qi = q[q0:q1].float().view(qlen, hkv, g, d) * qd[i].view(1, hkv, 1, 1)
        if q_positions is not None:
            qpos = q_positions[q0:q1].to(device=dev, dtype=torch.long)
        else:
            qpos = torch.arange(kv_len - qlen, kv_len, device=dev)
        spans = None if mm_prefix is None else mm_prefix[i]
        mask = visibility_mask(qpos, kv_len, causal=causal, window_left=window_left, spans=spans)

        s = torch.einsum("qhgd,khd->hgqk", qi, k) * softmax_scale  # [Hkv, G, qlen, kv]
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~mask, float("-inf"))
        m = s.amax(-1, keepdim=True)
        if sink is not None:
            m = torch.maximum(m, sink[..., None].expand_as(m))
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # fully masked row: no NaN
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)
        if sink is not None:
            denom = denom + torch.exp(sink[..., None] - m)
        o = torch.einsum("hgqk,khd->qhgd", p, v) / denom.permute(2, 0, 1, 3).clamp_min(1e-30)
        out[q0:q1] = o.reshape(qlen, hq, dv)
    return out.to(out_dtype)
