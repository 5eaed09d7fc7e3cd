"""An obviously-correct (slow) dense attention loop, the check on kernels/reference.py."""

import math

import torch


def _scale_for(descale, i, h):
    if descale is None:
        return 1.0
    d = descale.float()
    return float(d.reshape(-1)[0]) if d.numel() == 1 else float(d[i, h])


def naive_dense_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, softmax_scale, *,
                          causal=True, window_left=-1, mm_prefix=None, sinks=None, q_descale=None,
                          k_descale=None, v_descale=None, q_positions=None):
    """Token by token, head by head; keys read one position at a time through the block table."""
    total_q, hq, d = q.shape
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    out = torch.zeros(total_q, hq, d)
    for i in range(seqused_k.numel()):
        n = int(seqused_k[i])
        q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        spans = []
        if mm_prefix is not None:
            spans = [(int(s), int(e)) for s, e in mm_prefix[i].tolist() if s >= 0]
        for t in range(q0, q1):
            qp = int(q_positions[t]) if q_positions is not None else n - (q1 - q0) + (t - q0)
            allowed = []
            for kp in range(n):
                if window_left >= 0 and qp - kp > window_left:  # the window bounds the past side only
                    continue
                same_span = any(s <= qp < e and s <= kp < e for s, e in spans)
                if causal and kp > qp and not same_span:
                    continue
                allowed.append(kp)
            for h in range(hq):
                kh = h // g
                logits, vals = [], []
                for kp in allowed:
                    blk = int(block_table[i, kp // bs])
                    kv = k_cache[blk, kp % bs, kh].float() * _scale_for(k_descale, i, kh)
                    vv = v_cache[blk, kp % bs, kh].float() * _scale_for(v_descale, i, kh)
                    qv = q[t, h].float() * _scale_for(q_descale, i, kh)
                    logits.append(float((qv * kv).sum()) * softmax_scale)
                    vals.append(vv)
                extra = [float(sinks[h])] if sinks is not None else []
                if not logits:
                    continue  # nothing visible: zeros
                m = max(logits + extra)
                w = [math.exp(x - m) for x in logits]
                den = sum(w) + sum(math.exp(x - m) for x in extra)
                out[t, h] = sum(wi * vi for wi, vi in zip(w, vals)) / den
    return out


# (q_lens, kv_lens): prefill, chunked prefill, decode, mixed; always unequal lengths
MODES = {
    "prefill": ([13, 7, 20], [13, 7, 20]),
    "chunked": ([5, 9, 3], [21, 40, 9]),
    "decode": ([1, 1, 1, 1], [1, 17, 33, 50]),
    "mixed": ([1, 6, 12], [30, 6, 25]),
}
MASKS = {
    "causal": {},
    "window": dict(window_left=7),
    "mm_prefix": dict(mm_spans=True),
    "sinks": dict(sinks=True),
    "all": dict(window_left=9, mm_spans=True, sinks=True),
    # spans longer than the window: a span query sees later span keys beyond q + window_left
    "long_span": dict(window_left=2, mm_spans=True),
}


def spans_for(q_lens, kv_lens):
    # one span straddling the chunk boundary / inside the prompt, one short one; padded with -1
    return [[(max(0, kl - ql - 2), max(0, kl - ql - 2) + min(6, kl)), (0, 2)] if kl > 3 else [] for ql, kl
            in zip(q_lens, kv_lens)]
