"""Triton paged attention: varlen prefill / chunked prefill / decode, with split-KV decode.

One program = one kv head x (BLOCK_Q query tokens of one sequence) x one KV split. All G = Hq/Hkv
query heads of the kv head are packed as rows (row r = token r // G_PAD, head r % G_PAD), so each
K/V tile is read once for the whole GQA group. K/V are gathered through the block table per key
row (any page size, any order). FP8 K/V are widened exactly to fp16 and both dots run in fp16
(q, p cast; fp32 accumulate); e4m3 on the GPU through inline-asm cvt.rn.f16x2.e4m3x2 (see _widen); the k descale folds into the softmax scale and the v descale into the output, so the
inner loop never multiplies by a scale. FP8 q (quant-query) is widened the same way.

Split-KV (flash-decoding): for short query tiles the visible KV range [lo, hi) of each program is
cut into `num_splits` BLOCK_N-aligned chunks; each writes (m, l, acc) partials and a second kernel
merges them, or the last of them to finish does (kernels/split_merge.py; the sink logit joins there).
Prefill uses one split and writes the output directly.

Runs under TRITON_INTERPRET=1 on CPU tensors (FP8 included) for CI; there bf16 dots run in fp32
because the interpreter's tl.dot multiplies bf16 bit patterns as integers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from . import split_merge
from .attn_qkv import RawQKV, new_key_split, query_rows
from .cards import card_name
from .pdl import wait_then_release
from .reference import is_fp8
from .split_merge import merge_if_last
from .switches import switched

LOG2E = 1.4426950408889634


@triton.jit
def _widen(x, DOT_DTYPE: tl.constexpr, KV_ASM: tl.constexpr):
    """K/V tile -> dot dtype. KV_ASM (e4m3 -> fp16, GPU only): the packed cvt.rn.f16x2.e4m3x2 as inline asm,
    4 keys' bytes per 32-bit register. Being opaque to Triton's layout passes, the conversion stays at the
    global load (vectorized), and the fp16 tile reaches the mma through shared memory with ldmatrix(.trans),
    instead of an fp8 tile read back from shared memory byte by byte (V is transposed for the PV dot)."""
    if KV_ASM:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
            "=r,=r,r", [x.to(tl.uint8, bitcast=True)], dtype=tl.float16, is_pure=False, pack=4)
    else:
        return x.to(DOT_DTYPE)


@triton.jit
def _blocks(bt_ptr, seq, stride_bt, kp, k_ok, PAGE: tl.constexpr, OFF32: tl.constexpr):
    """The cache block of each key position kp (block-table lookups, masked by k_ok). OFF32 (OFFSETS_32): kp >= 0
    divided unsigned (a shift), the id kept in 32 bits for 32-bit cache offsets."""
    if OFF32:
        blk = tl.load(bt_ptr + seq * stride_bt + (kp.to(tl.uint32) // PAGE).to(tl.int32), mask=k_ok, other=0)
    else:
        blk = tl.load(bt_ptr + seq * stride_bt + kp // PAGE, mask=k_ok, other=0).to(tl.int64)
    return blk


@triton.jit
def _in_page(kp, PAGE: tl.constexpr, OFF32: tl.constexpr):
    """Each key position's row in its block (OFF32: unsigned, a mask)."""
    if OFF32:
        row = (kp.to(tl.uint32) % PAGE).to(tl.int32)
    else:
        row = kp % PAGE
    return row


@triton.jit
def _rows(ptr, blk, off, kvh, d, mask, stride_b, stride_s, stride_h):
    """A K or V tile: the rows at (block, offset) of kv head kvh, raw cache dtype."""
    return tl.load(ptr + blk[:, None] * stride_b + off[:, None] * stride_s + kvh * stride_h + d[None, :], mask=mask,
                   other=0.0)


@triton.jit
def _to_l2(ptr, blk, off, kvh, k_ok, stride_b, stride_s, stride_h, LINES: tl.constexpr, LINE: tl.constexpr):
    """Asks L2 for the 128-byte lines of a K or V tile's rows (LINES a row, LINE elements each); nothing comes into
    registers. L2 is the GPU's point of coherence, so a line fetched before a write to it is never read stale."""
    if LINES == 0:  # the interpreter runs no inline asm
        return
    row = ptr + blk * stride_b + off * stride_s + kvh * stride_h
    lines = row[:, None] + (tl.arange(0, LINES) * LINE)[None, :]
    lines = tl.where(k_ok[:, None], lines, ptr)  # masked rows ask for the cache's first line
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _earlier(raw, pre, kp, old, start, begin, PRE: tl.constexpr):
    """A tile read in the loop, with its earlier steps' rows (kp < old) taken from `pre`, read before the PDL wait,
    where PRE is REGS and this is the first tile."""
    if PRE == 1:
        if start == begin:
            raw = tl.where((kp < old)[:, None], pre, raw)
    return raw


@triton.jit
def _query(q_ptr, qd_ptr, kd_ptr, q_start, tok, head, d, row_ok, d_ok, seq, kvh, hq, sm_scale_log2, stride_qt, stride_qh,
           qw_ptr, cos_ptr, sin_ptr, stride_cs, eps, G: tl.constexpr, HAS_QD: tl.constexpr, HAS_KD: tl.constexpr,
           DOT_DTYPE: tl.constexpr, QKV: tl.constexpr, D: tl.constexpr, G_PAD: tl.constexpr, M: tl.constexpr):
    """A program's query rows in the dot dtype (QKV: normed and rotated here from the raw q columns,
    kernels/attn_qkv.py), and the softmax scale (log2 units) with the q and k descales."""
    if QKV:
        q = query_rows(q_ptr, qw_ptr, cos_ptr, sin_ptr, q_start, kvh, stride_qt, stride_qh, stride_cs, eps, G, G_PAD,
                       M // G_PAD, D).to(DOT_DTYPE)
    else:
        q = tl.load(q_ptr + (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(DOT_DTYPE)
    scale = sm_scale_log2
    if HAS_QD:
        scale *= tl.load(qd_ptr + seq * (hq // G) + kvh)
    if HAS_KD:
        scale *= tl.load(kd_ptr + seq * (hq // G) + kvh)
    return q, scale


@triton.jit
def _attn_fwd(
    q_ptr, k_ptr, v_ptr, out_ptr, bt_ptr, cu_q_ptr, seqused_ptr, qpos_ptr, mm_ptr, sink_ptr,
    qd_ptr, kd_ptr, vd_ptr, ws_acc_ptr, ws_ml_ptr,
    sm_scale_log2, window_left,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_ot, stride_oh, stride_bt, num_q_tiles, num_splits, hq,
    G: tl.constexpr, G_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    D: tl.constexpr, D_PAD: tl.constexpr, PAGE: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_QPOS: tl.constexpr, NUM_SPANS: tl.constexpr, HAS_SINK: tl.constexpr,
    HAS_QD: tl.constexpr, HAS_KD: tl.constexpr, HAS_VD: tl.constexpr, SPLIT: tl.constexpr,
    DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr, KV_ASM: tl.constexpr = False, PDL: tl.constexpr = False,
    PRE: tl.constexpr = 0, LINES: tl.constexpr = 1, LINE: tl.constexpr = 64, cnt_ptr=None, MERGE: tl.constexpr = False,
    S_PAD: tl.constexpr = 1, LEAN: tl.constexpr = False, POS32: tl.constexpr = False,
    OFF32: tl.constexpr = False,
    qw_ptr=None, kw_ptr=None, cos_ptr=None, sin_ptr=None, slot_ptr=None, kcw_ptr=None, vcw_ptr=None, stride_cs=0,
    v_col=0, eps=0.0, QKV: tl.constexpr = False, NEW_KV: tl.constexpr = False,
):
    if PRE == 0:
        wait_then_release(PDL)
    M: tl.constexpr = BLOCK_Q * G_PAD
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq = pid // num_q_tiles
    qtile = pid % num_q_tiles
    if POS32:  # q_len, and so every key position below, in 32 bits; only the token index widened for addresses
        q_first = tl.load(cu_q_ptr + seq)
        q_len = tl.load(cu_q_ptr + seq + 1) - q_first
        q_start = q_first.to(tl.int64)
    else:
        q_start = tl.load(cu_q_ptr + seq).to(tl.int64)
        q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    kv_len = tl.load(seqused_ptr + seq)
    if PRE == 0 and not LEAN:
        if qtile * BLOCK_Q >= q_len:
            return
    if NEW_KV:
        if split == num_splits - 1:
            if PRE != 0:
                wait_then_release(PDL)
            new_key_split(q_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, slot_ptr, kcw_ptr, vcw_ptr, ws_acc_ptr, ws_ml_ptr,
                          q_start, q_len, kvh, hq, split, num_splits, sm_scale_log2, stride_qt, stride_qh,
                          stride_cs, v_col, eps, G, G_PAD, D, DOT_DTYPE)
            return

    rows = tl.arange(0, M)
    tok = qtile * BLOCK_Q + rows // G_PAD
    g = rows % G_PAD
    row_ok = (tok < q_len) & (g < G)
    head = kvh * G + g
    d = tl.arange(0, D_PAD)
    d_ok = d < D
    if HAS_QPOS:
        qp = tl.load(qpos_ptr + q_start + tok, mask=row_ok, other=0).to(tl.int32)
    else:
        qp = kv_len - q_len + tok

    if PRE == 0 and not LEAN:
        q, scale = _query(q_ptr, qd_ptr, kd_ptr, q_start, tok, head, d, row_ok, d_ok, seq, kvh, hq, sm_scale_log2,
                          stride_qt, stride_qh, qw_ptr, cos_ptr, sin_ptr, stride_cs, eps, G, HAS_QD, HAS_KD,
                          DOT_DTYPE, QKV, D, G_PAD, M)

    # Visible key range of this tile: [lo, hi).
    qp_max = tl.max(tl.where(row_ok, qp, -1), 0)
    qp_min = tl.min(tl.where(row_ok, qp, 2147483647), 0)
    hi = kv_len
    if CAUSAL and NUM_SPANS == 0:
        hi = tl.minimum(hi, qp_max + 1)
    lo = 0
    if HAS_WINDOW:  # the past side only: a span's later keys stay visible (kernels/reference.py)
        lo = tl.maximum(lo, qp_min - window_left)
    # Tiles start on BLOCK_N multiples (a window's lo is arbitrary); masks use the exact lo.
    begin = (lo // BLOCK_N) * BLOCK_N
    if SPLIT:  # NEW_KV: the last split is the new key's (new_key_split); the others share the tiles
        per = tl.cdiv(tl.cdiv(tl.maximum(hi - begin, 0), BLOCK_N), num_splits - NEW_KV) * BLOCK_N
        begin = begin + split * per
        hi = tl.minimum(hi, begin + per)
    old = kv_len - q_len  # keys before this step's queries: written by earlier steps
    if PRE != 0:  # before the PDL wait: the first key tile (see `prefetch_kv` below)
        kp0 = begin + tl.arange(0, BLOCK_N)
        ok0 = (kp0 < hi) & (kp0 >= lo)
        blk0 = _blocks(bt_ptr, seq, stride_bt, kp0, ok0, PAGE, OFF32)
        if PRE == 1:  # earlier steps' rows into registers
            pre_ok = (ok0 & (kp0 < old))[:, None] & d_ok[None, :]
            k0 = _rows(k_ptr, blk0, _in_page(kp0, PAGE, OFF32), kvh, d, pre_ok, stride_kb, stride_ks, stride_kh)
            v0 = _rows(v_ptr, blk0, _in_page(kp0, PAGE, OFF32), kvh, d, pre_ok, stride_vb, stride_vs, stride_vh)
        else:  # every row's lines into L2
            _to_l2(k_ptr, blk0, _in_page(kp0, PAGE, OFF32), kvh, ok0, stride_kb, stride_ks, stride_kh, LINES, LINE)
            _to_l2(v_ptr, blk0, _in_page(kp0, PAGE, OFF32), kvh, ok0, stride_vb, stride_vs, stride_vh, LINES, LINE)
            k0 = 0.0
            v0 = 0.0
        wait_then_release(PDL)
        if not LEAN:
            if qtile * BLOCK_Q >= q_len:
                return
        q, scale = _query(q_ptr, qd_ptr, kd_ptr, q_start, tok, head, d, row_ok, d_ok, seq, kvh, hq, sm_scale_log2,
                          stride_qt, stride_qh, qw_ptr, cos_ptr, sin_ptr, stride_cs, eps, G, HAS_QD, HAS_KD,
                          DOT_DTYPE, QKV, D, G_PAD, M)
    else:
        k0 = 0.0  # no prefetched tile (`_earlier` keeps the loop's)
        v0 = 0.0
        if LEAN:  # the first tile's block ids asked for before q, whose trip to shared memory would hold them back
            kp0 = begin + tl.arange(0, BLOCK_N)
            blk0 = _blocks(bt_ptr, seq, stride_bt, kp0, (kp0 < hi) & (kp0 >= lo), PAGE, OFF32)
            q, scale = _query(q_ptr, qd_ptr, kd_ptr, q_start, tok, head, d, row_ok, d_ok, seq, kvh, hq, sm_scale_log2,
                              stride_qt, stride_qh, qw_ptr, cos_ptr, sin_ptr, stride_cs, eps, G, HAS_QD, HAS_KD,
                              DOT_DTYPE, QKV, D, G_PAD, M)

    skip = tl.where(q_len == 1, kv_len - 1, -1)  # NEW_KV: the new token's key, the last split's (-1: none)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, D_PAD], tl.float32)
    for start in range(begin, hi, BLOCK_N):
        kp = start + tl.arange(0, BLOCK_N)
        k_ok = (kp < hi) & (kp >= lo)
        if NEW_KV:  # the last split's alone (a read of its cache row here could come before that split's write)
            k_ok = k_ok & (kp != skip)
        kv_ok = k_ok[:, None] & d_ok[None, :]
        if PRE == 1:  # the first tile: earlier steps' keys read before the wait, this step's read now
            if start == begin:
                blk = blk0
                kv_ok = kv_ok & (kp >= old)[:, None]
            else:
                blk = _blocks(bt_ptr, seq, stride_bt, kp, k_ok, PAGE, OFF32)
        elif LEAN:  # the first tile's block ids read above (the loop's own read masked off there)
            first = kp < begin + BLOCK_N
            blk = tl.where(first, blk0, _blocks(bt_ptr, seq, stride_bt, kp, k_ok & ~first, PAGE, OFF32))
        else:
            blk = _blocks(bt_ptr, seq, stride_bt, kp, k_ok, PAGE, OFF32)
        off = _in_page(kp, PAGE, OFF32)
        k = _widen(_earlier(_rows(k_ptr, blk, off, kvh, d, kv_ok, stride_kb, stride_ks, stride_kh), k0, kp, old,
                            start, begin, PRE), DOT_DTYPE, KV_ASM)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * scale
        ok = row_ok[:, None] & k_ok[None, :]
        if HAS_WINDOW:
            diff = qp[:, None] - kp[None, :]
            ok = ok & (diff <= window_left)
        if CAUSAL:
            order = kp[None, :] <= qp[:, None]
            for si in tl.static_range(NUM_SPANS):
                st = tl.load(mm_ptr + (seq * NUM_SPANS + si) * 2)
                en = tl.load(mm_ptr + (seq * NUM_SPANS + si) * 2 + 1)
                in_q = (qp >= st) & (qp < en)
                in_k = (kp >= st) & (kp < en)
                order = order | (in_q[:, None] & in_k[None, :])
            ok = ok & order
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _widen(_earlier(_rows(v_ptr, blk, off, kvh, d, kv_ok, stride_vb, stride_vs, stride_vh), v0, kp, old,
                            start, begin, PRE), DOT_DTYPE, KV_ASM)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v)
        m_i = m_new

    if HAS_VD:
        acc = acc * tl.load(vd_ptr + seq * (hq // G) + kvh)
    if SPLIT:
        # partials: acc [total_q, splits, Hq, D], (m, l) [total_q, splits, Hq, 2], m in log2 units
        base = ((q_start + tok) * num_splits + split) * hq + head  # int64 via q_start
        tl.store(ws_acc_ptr + base[:, None] * D + d[None, :], acc, mask=row_ok[:, None] & d_ok[None, :])
        tl.store(ws_ml_ptr + base * 2, m_i, mask=row_ok)
        tl.store(ws_ml_ptr + base * 2 + 1, l_i, mask=row_ok)
        if MERGE:  # the group's last program to get here merges (kernels/split_merge.py)
            merge_if_last(cnt_ptr + pid * (hq // G) + kvh, ws_acc_ptr, ws_ml_ptr, out_ptr, sink_ptr, q_start,
                          qtile * BLOCK_Q, q_len, kvh, num_splits, hq, stride_ot, stride_oh, BLOCK_Q, G, S_PAD, D,
                          D_PAD, HAS_SINK)
    else:
        if HAS_SINK:
            sk = tl.load(sink_ptr + head, mask=row_ok, other=0.0) * 1.4426950408889634
            m_new = tl.maximum(m_i, sk)
            corr = tl.exp2(m_i - m_new)
            l_i = l_i * corr + tl.exp2(sk - m_new)
            acc = acc * corr[:, None]
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(out_ptr + (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def _pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _num_sms(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


# Decode at batch <= 4: BLOCK_N 32, 2 stages, about one program per SM (kv heads x splits), splits down to one
# key tile. At B1 x 544 on the H200 (bench/results/h200/splits/S) it took 31B sliding 16.6 -> 11.2 us
# (FP8 15.6 -> 10.7), 31B full 19.0 -> 10.9, E4B sliding 20.7 -> 8.0, E4B full 18.0 -> 10.2: those calls
# ran 4-20 programs of 3-5 tiles each. Larger batches keep pick_config's tiles (tuned at B64 x 8192).
SMALL_BATCH = 4
# ... and up to batch 16 on the cards that measured it. E4B's batch-16 step on the H100 with this kernel on every layer
# (`--selection latency_triton`, variant attn_b16): 3,028-3,033 tok/s against 2,884 on pick_config's tiles (1.051x;
# bench/results/h100/attn_b16/). The H200 takes it with its batch-16 rule (SMALL_WIDE_BY_CARD below; without this
# entry the rule's launch switches never apply there: bench/results/h200/b16_rule/D/). Batches 5-15 are unmeasured.
SMALL_BATCH_BY_CARD = {"NVIDIA H100 80GB HBM3": 16, "NVIDIA H200": 16}


# A small decode's launch: up to SMALL["batch"] sequences, SMALL["block_n"]-key tiles, at most SMALL["splits"] splits
# (fewer: longer programs, a smaller merge) and SMALL["per_sm"] programs an SM (None: SMALL_WIDE_BY_CARD's above
# SMALL_BATCH, else one), SMALL["stages"] software-pipeline stages, SMALL["warps"] warps a program (None:
# pick_config's).
# Measurements' switches (`small_launch(...)`, variants splits1 .. splits8, attn_w8, attn_s1, attn_n16, attn_b16* of
# kselect/measurement/gemv_variants.py). In E4B's batch-1 step on the H100, 8 and 4 splits were slower (0.975x,
# 0.936x), 8 warps and one stage ties (bench/results/h100/kv_l2/), 16-key tiles a tie (0.995x; 0.981x at batch 16:
# bench/results/h100/attn_n16/).
# SMALL["batch"] None: SMALL_BATCH_BY_CARD's, else SMALL_BATCH.
SMALL = {"batch": None, "block_n": 32, "per_sm": None, "splits": 64, "stages": 2, "warps": None}
# Above SMALL_BATCH, on the cards that measured it: about SMALL_WIDE_BY_CARD's per_sm programs an SM (SMALL["per_sm"]
# None), and 32-bit cache offsets (OFFSETS_32 None; only where the caches fit them). On the H100, with PDL at 16-token
# steps and kernels/skinny_gemm.py's W prefetch, E4B's batch-16 step went from 2,979-2,981 to 3,115-3,120 tok/s, 1.047x
# and 1.045x in two calls; the launch with one program an SM, 1.016x less (bench/results/h100/b16_rule/). On the
# H200 the same four switches with this launch up to batch 16 took it from 3,224-3,228 to 3,561-3,569 tok/s (1.105x;
# bench/results/h200/b16_rule/). Batches 5-15 follow the same rule, unmeasured.
SMALL_WIDE_BY_CARD = {card: dict(per_sm=2, off32=True) for card in ("NVIDIA H100 80GB HBM3", "NVIDIA H200")}


def small_batch(device) -> int:
    """The largest batch a decode call on `device` takes the small launch at (SMALL["batch"] where set)."""
    if SMALL["batch"] is not None:
        return SMALL["batch"]
    return SMALL_BATCH_BY_CARD.get(card_name(device), SMALL_BATCH)


def _bad_small(key, v) -> bool:
    if key not in SMALL:
        return True
    if key == "block_n":
        return not (isinstance(v, int) and v >= 16 and not v & (v - 1))
    return v is not None and (not isinstance(v, int) or v < (0 if key == "batch" else 1))


def small_launch(**changes):
    """SMALL's entries changed inside (a CUDA graph captured inside keeps them)."""
    bad = [k for k, v in changes.items() if _bad_small(k, v)]
    if bad:
        raise ValueError(f"small_launch: {', '.join(f'{k}={changes[k]!r}' for k in bad)}; "
                         f"keys {', '.join(SMALL)}, each a positive int (batch may be 0: never, or None: the card's; "
                         f"per_sm and warps may be None; block_n a power of two >= 16)")
    return switched(SMALL, **changes)


def small_decode(programs: int, span: int, sms: int, per_sm: int = 1) -> tuple[int, int, int]:
    """(BLOCK_N, stages, splits) of a decode call at batch <= SMALL["batch"] with `programs` = batch x kv heads x
    query tiles and `span` visible keys: about SMALL["per_sm"] (where set, else `per_sm`) programs an SM, each at least
    one key tile."""
    block_n = SMALL["block_n"]
    per_sm = SMALL["per_sm"] if SMALL["per_sm"] is not None else per_sm
    return block_n, SMALL["stages"], max(1, min(triton.cdiv(per_sm * sms, programs),
                                                 triton.cdiv(span, block_n), SMALL["splits"]))


def wide_rule(device, small: bool, batch: int) -> dict:
    """SMALL_WIDE_BY_CARD's entry of `device`'s card for a small decode above SMALL_BATCH sequences; {} otherwise."""
    return SMALL_WIDE_BY_CARD.get(card_name(device), {}) if small and batch > SMALL_BATCH else {}


def pick_config(d_pad: int, g_pad: int, max_q: int, decode: bool, interpret: bool, kv_fp8: bool = False):
    """(BLOCK_Q, BLOCK_N, num_warps, num_stages, KV_ASM). M = BLOCK_Q * G_PAD rows >= 16 (tl.dot minimum).

    Decode values are the best of kselect.measurement.kernels.tune_triton_decode on the H200
    (bench/results/h200/kernels/tune.json, tune_fp8.json): bf16 31B d512 B64 L8192 at 32/4/4 reads 98% of copy; FP8 peaks at the same
    tiles (d512 32/4/4, d256 64/4/2) but only ~48% of copy: the fp8->fp16 widening, not the bytes, bounds it."""
    if interpret:
        return max(1, 16 // g_pad), 16, 4, 1, False
    if decode:
        block_q = max(1, 16 // g_pad, min(_pow2(max_q), 64 // g_pad))
        block_n = {512: 32, 256: 64}.get(d_pad, 128)
        return block_q, block_n, 4, 4 if d_pad >= 512 else 2, kv_fp8  # 3 stages of 64x256 K+V tiles overflow smem
    rows = 64 if d_pad <= 256 else 32
    block_q = max(1, rows // g_pad)
    block_n = 64 if d_pad <= 256 else 32
    return block_q, block_n, 4 if d_pad <= 128 else 8, 2, False


# PREFETCH_KV: in a small-batch decode launched with PDL, each program reads the tables before the PDL wait, and its
# first key tile: REGS, the earlier steps' rows into registers, so that after the wait only q and this step's keys (the
# last q_len positions, which the kernel before wrote) are read; L2, every row's lines into L2 only (a hint: nothing
# is read into registers, and L2 is coherent). Safe by kernels/pdl.py's protocol: a PDL kernel starts after every
# kernel but the one before it has completed. Not with PDL's early release (kernels/pdl.py `early`), which gives that
# up. In E4B's batch-1 step on the H100 REGS measured 0.930x, its tile spilling registers
# (bench/results/h100/kv_pre/), and L2 1.008x alone, a tie (bench/results/h100/kv_l2/). `prefetch_kv(mode)` sets it;
# None (the default): the card's rule (PDL_DECODE_BY_CARD), else OFF.
OFF, REGS, L2 = 0, 1, 2
PREFETCH_KV = None

# LEAN_START: a small decode's programs (one query tile a sequence) start with fewer dependent round trips before
# the first key tile. Without it the SM90 code waits for cu_seqlens_q, tests the early exit, then loads the sequence's
# length, then q (stored to shared memory, so waited for), then the block ids, then the tile: four. With it there is
# no early exit (a tile past its sequence's queries has every row masked: no key read, no store), and the first
# tile's block ids are asked for before q: the lengths, then q with the block ids, then the tile. Alone, on the H200,
# it took 0.24-0.40 us off E4B's batch-1 attention and merge, and E4B's batch-1 step tied, 1.001x
# (bench/results/h200/attn_floor/). `lean_start(on)` sets it; None: the card's rule, else off.
LEAN_START = None


def lean_start(on: bool):
    """LEAN_START inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), LEAN_START=bool(on))


# POSITIONS_32: key and query positions in 32-bit integers (they are: cu_seqlens_q and seqused_k are int32), only the
# token index widened to 64 bits for addresses. Without it q_len inherits the 64-bit token index, and with it every
# key position, tile offset and mask: compiled for SM90, E4B's sliding-layer decode goes from 1,704 to 1,296
# instructions (full layer 2,896 to 2,208), fewer 64-bit multiplies in each K and V row's address and no 64-bit
# division (bench/results/sm90_sass/). Alone, a tie in E4B's batch-1 step on the H100 (1.006x,
# bench/results/h100/pos32/). `positions_32(on)` sets it for every call; None: the card's rule, else off.
POSITIONS_32 = None


def positions_32(on: bool):
    """POSITIONS_32 inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), POSITIONS_32=bool(on))


# OFFSETS_32: K/V row offsets in 32-bit integers where every offset of each cache fits them (fits_32),
# and a key position's block and row found by unsigned division (positions are never negative: a shift and a mask,
# not a signed division's corrections). Without it each K and V row's address is a 64-bit product. Compiled for SM90
# (bench/results/sm90_sass/, rule_off32) it takes E4B's batch-1 sliding-layer attention under the H100's rule from
# 1,592 to 1,336 instructions (full layer 2,808 to 2,184). The same bits. `offsets_32(on)` sets it for every call;
# None: the card's rule above SMALL_BATCH (SMALL_WIDE_BY_CARD), else off.
OFFSETS_32 = None


def offsets_32(on: bool):
    """OFFSETS_32 inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), OFFSETS_32=bool(on))


def fits_32(*caches: torch.Tensor) -> bool:
    """Whether every element offset of these caches fits a signed 32-bit integer: the farthest element by the strides
    (a view into a larger tensor, K and V interleaved a block, reaches past its own element count)."""
    return all(sum((n - 1) * st for n, st in zip(c.shape, c.stride())) < 2**31 for c in caches)


# PREFETCH_KV, LEAN_START and POSITIONS_32, in a small decode launched with PDL (a one-token step's), on the cards that
# measured them faster together. On the H100 each tied alone; with kernels/gemv.py's PAIR_ONE_LOOP, E4B's batch-1 step
# went from 249.0-249.4 to 256.0-256.2 tok/s, 1.028x, in two calls (bench/results/h100/pair1/). A switch set above
# overrides its entry.
PDL_DECODE_BY_CARD = {"NVIDIA H100 80GB HBM3": dict(prefetch=L2, lean=True, pos32=True)}


def pdl_decode_rule(device, small: bool, launch: dict) -> dict:
    """PDL_DECODE_BY_CARD's entry of `device`'s card for a small decode launched with PDL (`launch`: kernels/pdl.py
    `args`; not its early release); {} for any other call or card."""
    return PDL_DECODE_BY_CARD.get(card_name(device), {}) if small and launch["PDL"] is True else {}


def _mode(on) -> int:
    """True (REGS, as before the L2 mode existed), False or None (OFF), or a mode."""
    mode = REGS if on is True else OFF if on in (False, None) else on
    if mode not in (OFF, REGS, L2):
        raise ValueError(f"prefetch_kv mode must be {OFF}, {REGS} or {L2}, got {on!r}")
    return mode


def prefetch_kv(on):
    """PREFETCH_KV inside (a CUDA graph captured inside keeps it)."""
    return switched(globals(), PREFETCH_KV=_mode(on))


def wants_prefetch(small: bool, launch: dict, rule: dict | None = None) -> int:
    """How a call reads its first key tile before the PDL wait (OFF: not at all): in a small-batch decode launched
    with PDL (`launch`: kernels/pdl.py `args`) and not with its early release, PREFETCH_KV where set, else the card's
    `rule` (pdl_decode_rule)."""
    if not (small and launch["PDL"] is True):
        return OFF
    return PREFETCH_KV if PREFETCH_KV is not None else (rule or {}).get("prefetch", OFF)


def decode_switches(device, small: bool, launch: dict, n_qt: int, prefetch=None, lean=None,
                    pos32=None) -> tuple[int, bool, bool]:
    """(PRE, LEAN, POS32) of a call: the call's own arguments where given (paged_attention_triton's), else the module's
    switches where set, else the card's rule for a small decode launched with PDL (pdl_decode_rule). The lean start
    only where the call has one query tile, and without an argument only in a small decode."""
    rule = pdl_decode_rule(device, small, launch)
    pre = wants_prefetch(small, launch, rule) if prefetch is None else _mode(prefetch)
    lean_on = (LEAN_START if LEAN_START is not None else rule.get("lean", False)) and small if lean is None else lean
    if pos32 is None:
        pos32 = POSITIONS_32 if POSITIONS_32 is not None else rule.get("pos32", False)
    return pre, n_qt == 1 and bool(lean_on), bool(pos32)


def _descale_arg(x, b, hkv, device):
    if x is None:
        return None
    x = x.to(device=device, dtype=torch.float32)
    if x.numel() == 1:
        return x.reshape(1, 1).expand(b, hkv).contiguous()
    return x.reshape(b, hkv).contiguous()


def paged_attention_triton(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, softmax_scale, *,
                           max_seqlen_q=None, max_seqlen_k=None, causal=True, window_left=-1, mm_prefix=None,
                           sinks=None, q_descale=None, k_descale=None, v_descale=None, q_positions=None,
                           out_dtype=None, num_splits=None, config=None, prefetch=None, merge_last=None,
                           lean=None, pos32=None, off32=None):
    """Same contract as kernels.reference.paged_attention. Pass max_seqlen_q/k (host ints) to avoid a sync.
    prefetch: the first key tile read before the PDL wait (None: as PREFETCH_KV, or the card's rule, says for a small
    decode launched with PDL; True or a mode (REGS, L2): always, for tests). merge_last: a split call's last program
    merges (None: where MERGE_LAST and a small decode; True: wherever the call splits, for tests). lean: the lean
    start (None: as LEAN_START, or the card's rule, says for a small decode; True: wherever the call has one query
    tile, for tests). pos32: 32-bit positions (None: as POSITIONS_32, or the card's rule, says). off32: 32-bit cache
    offsets (None: as OFFSETS_32, or the card's rule above SMALL_BATCH, says), only where both caches fit them.
    q may be a kernels/attn_qkv.py RawQKV: at one new token a sequence the kernel norms and rotates q and makes the new
    k and v itself; any other call runs its q/k/v kernel first."""
    max_q = int(max_seqlen_q) if max_seqlen_q is not None else int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
    raw = None
    if isinstance(q, RawQKV):
        if q.fits(max_q, k_cache) and q_descale is None and q_positions is None:
            raw = q
            q = raw.qkv.view(raw.qkv.shape[0], -1, raw.d)  # (T, columns / d, d): the kernel's q strides
        else:
            q = q.ready()
    total_q, hq, d = q.shape
    if raw is not None:
        hq = raw.hq
    nb, page, hkv, dk = k_cache.shape
    assert dk == d and v_cache.shape[-1] == d, "head_size_v != head_size is not supported"
    assert hq % hkv == 0
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    b = seqused_k.numel()
    dev = q.device
    if out_dtype is None:
        out_dtype = torch.bfloat16 if is_fp8(q.dtype) else q.dtype
    max_k = int(max_seqlen_k) if max_seqlen_k is not None else int(seqused_k.max())
    g = hq // hkv
    g_pad, d_pad = _pow2(g), _pow2(d)
    interpret = dev.type != "cuda"
    # fp8 q (quant-query) is widened exactly to the 16-bit output dtype; otherwise dots run in q's dtype
    dot_dtype = q.dtype
    if is_fp8(q.dtype):
        dot_dtype = out_dtype if out_dtype in (torch.bfloat16, torch.float16) else torch.float32
    kv_fp8 = is_fp8(k_cache.dtype)
    if kv_fp8 and dot_dtype != torch.float32:
        # fp8 K/V widen to fp16 with one packed cvt.rn.f16x2.e4m3x2 per pair (to bf16 costs another cvt per
        # element); q and p run in fp16 (q is RMS-normed, p in [0, 1]), accumulation stays fp32
        dot_dtype = torch.float16
    if interpret and dot_dtype == torch.bfloat16:
        # the CPU interpreter (triton 3.9) multiplies bf16 dot operands as raw uint16 bit patterns
        dot_dtype = torch.float32
    decode = max_q <= 16
    cfg = tuple(config or pick_config(d_pad, g_pad, max_q, decode, interpret, kv_fp8))
    block_q, block_n, warps, stages = cfg[:4]
    kv_asm = bool(cfg[4]) if len(cfg) > 4 else kv_fp8 and not interpret
    kv_asm = kv_asm and k_cache.dtype == torch.float8_e4m3fn and dot_dtype == torch.float16
    n_qt = triton.cdiv(max_q, block_q)
    span = max_k if window_left < 0 else min(max_k, window_left + max_q)
    small = decode and config is None and not interpret and b <= small_batch(dev)
    wide = wide_rule(dev, small, b)
    if small:  # a few programs, each latency-bound: short tiles, split down to one tile a program
        block_n, stages, splits = small_decode(b * hkv * n_qt, span, _num_sms(dev), wide.get("per_sm", 1))
        warps = SMALL["warps"] or warps
        num_splits = splits if num_splits is None else num_splits
    if num_splits is None:
        num_splits = 1
        if decode:
            want = triton.cdiv(2 * _num_sms(dev), b * hkv * n_qt)
            num_splits = max(1, min(want, triton.cdiv(span, 4 * block_n), 64))
    out = torch.empty(total_q, hq, d, dtype=out_dtype, device=dev)
    new_kv = raw is not None and raw.k_cache is not None
    num_splits += new_kv  # the new key's split (kernels/attn_qkv.py new_key_split)
    split = num_splits > 1
    ws_acc = ws_ml = out
    if split:
        ws_acc = torch.empty(total_q, num_splits, hq, d, dtype=torch.float32, device=dev)
        ws_ml = torch.empty(total_q, num_splits, hq, 2, dtype=torch.float32, device=dev)
    i32 = lambda t: t.to(device=dev, dtype=torch.int32).contiguous()  # noqa: E731
    cu, su, bt = i32(cu_seqlens_q), i32(seqused_k), i32(block_table)
    spans = 0 if mm_prefix is None else mm_prefix.shape[1]
    mm = i32(mm_prefix) if spans else cu
    qpos = q_positions.to(device=dev, dtype=torch.int64).contiguous() if q_positions is not None else cu
    snk = sinks.to(device=dev, dtype=torch.float32).contiguous() if sinks is not None else cu
    qd, kd, vd = (_descale_arg(x, b, hkv, dev) for x in (q_descale, k_descale, v_descale))
    grid = (b * n_qt, hkv, num_splits)
    launch = pdl.args(out)
    pre, lean_start_on, pos32_on = decode_switches(dev, small, launch, n_qt, prefetch, lean, pos32)
    if off32 is None:
        off32 = OFFSETS_32 if OFFSETS_32 is not None else wide.get("off32", False)
    off32 = bool(off32) and fits_32(k_cache, v_cache)
    line = 128 // k_cache.element_size()  # elements of a 128-byte line; none asked for in the interpreter (no asm)
    lines = 0 if interpret else _pow2(triton.cdiv(d, line))
    merge = split and not new_kv and (split_merge.MERGE_LAST and small if merge_last is None else bool(merge_last))
    cnt = split_merge.tickets(dev, b * n_qt * hkv) if merge else cu
    _attn_fwd[grid](
        q, k_cache, v_cache, out, bt, cu, su, qpos, mm, snk,
        qd if qd is not None else cu, kd if kd is not None else cu, vd if vd is not None else cu, ws_acc, ws_ml,
        softmax_scale * LOG2E, window_left,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), bt.stride(0),
        n_qt, num_splits, hq,
        G=g, G_PAD=g_pad, BLOCK_Q=block_q, BLOCK_N=block_n, D=d, D_PAD=d_pad, PAGE=page, CAUSAL=causal,
        HAS_WINDOW=window_left >= 0, HAS_QPOS=q_positions is not None, NUM_SPANS=spans,
        HAS_SINK=sinks is not None, HAS_QD=qd is not None, HAS_KD=kd is not None, HAS_VD=vd is not None,
        SPLIT=split, DOT_DTYPE=_TL[dot_dtype], IEEE=dot_dtype == torch.float32, KV_ASM=kv_asm,
        num_warps=warps, num_stages=stages, PRE=pre, LINES=lines, LINE=line, cnt_ptr=cnt, MERGE=merge,
        S_PAD=_pow2(num_splits) if merge else 1, LEAN=lean_start_on, POS32=pos32_on, OFF32=off32,
        **(raw.args() if raw is not None else {}), **launch,
    )
    if split and not merge:
        split_merge._merge_splits[(total_q, hq)](
            ws_acc, ws_ml, out, snk, num_splits, hq, out.stride(0), out.stride(1),
            S_PAD=_pow2(num_splits), D=d, D_PAD=d_pad, HAS_SINK=sinks is not None, num_warps=4,
            **pdl.args(out, late=True))
    return out

