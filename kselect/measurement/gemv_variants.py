"""Launch-parameter variants of kernels/gemv.py and kernels/skinny_gemm.py, which rows run on which, and the fused ops'
switches (the add-norm fold and tail, L2 prefetch, PDL's reach and early release, the TMA GEMV, gated pairs, the
attention's key prefetch and merge, the add-norm's early residual), compared inside the real decode step by
kselect.measurement.gemma4.fusion (`--modes triton+<variant>`, or `triton+<a>+<b>` for two; issue #16).

Why inside the step: under programmatic dependent launch a GEMV reads its first K chunk of weights before it waits
for the kernel before it (kernels/pdl.py). A wider first chunk moves more of the weight read into that kernel's
tail, which a standalone timing (kselect.measurement.kernels.gemv) cannot show. Each variant maps a projection's shape
(N, K) to the config entries it changes (kernels/gemv.config), None elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path


def _pow2(k: int) -> int:
    return 1 << (k - 1).bit_length()


def _small(n: int, k: int) -> bool:
    """E4B's q/k/v (3072 x 2560), o (2560 x 2048) and per-layer-input gate (256 x 2560): a few MB each."""
    return n <= 4096 and 256 < k <= 4096


def small_whole_k(n, k):  # the whole row before the wait
    return dict(first_k=_pow2(k)) if _small(n, k) else None


def small_whole_k_n1(n, k):  # ... one row a program (twice the programs, half the registers)
    return dict(block_n=1, first_k=_pow2(k)) if _small(n, k) else None


def small_first_2048(n, k):  # 2,048 columns before the wait, the rest in 512-column chunks
    return dict(first_k=2048, block_k=512) if _small(n, k) else None


def wide_first_1024(n, k):  # gate/up and the LM head (N >= 16384): 1,024 columns before the wait, not 256
    return dict(first_k=1024) if n >= 16384 else None


def down_first_4096(n, k):  # down (2560 x 10240): 4,096 columns before the wait
    return dict(first_k=4096) if n <= 4096 and k > 4096 else None


def ahead_all(n, k):  # every shape: W's loads one chunk ahead of the multiplies (two chunks in flight a program)
    return dict(ahead=1)


def chunks_2x(n, k):  # every shape: K chunks after the first twice as long (twice the bytes a load in flight)
    from kselect.kernels import gemv

    return dict(block_k=2 * gemv.base_config(n, k)["block_k"])


def rows_2x(n, k):  # every shape: twice the rows of W a program (twice the bytes a load, half the programs)
    from kselect.kernels import gemv

    return dict(block_n=2 * gemv.base_config(n, k)["block_n"])


def first_64(n, k):  # every shape: 64 columns of W before the wait (a 128-byte line a row), the rest after
    return dict(first_k=64)


def first_256(n, k):  # the shapes on 1,024-column chunks (q/k/v, o, down, the per-layer gate): 256 columns before
    from kselect.kernels import gemv

    return dict(first_k=256) if gemv.base_config(n, k)["block_k"] > 256 else None


def combined(n, k):  # small_first_2048 + wide_first_1024 + down_first_4096
    return small_first_2048(n, k) or wide_first_1024(n, k) or down_first_4096(n, k)


# kernels/skinny_gemm.py's variants (2 to 16 rows), and where the rows go (gemma4/fused.py projection_rows)
def sk_bn32(n, k):  # 32 rows of W a program for the small projections (half the programs)
    return dict(block_n=32) if n <= 4096 else None


def sk_bk256(n, k):  # 256-column tiles
    return dict(block_k=256)


def sk_st3(n, k):  # three tiles in flight, not four
    return dict(num_stages=3)


def sk_wide32(n, k):  # 32 rows of W a program for gate/up and the LM head
    return dict(block_n=32) if n > 4096 else None


def sk_swap_lm(n, k):  # the LM head (the one projection past 65,536 rows) as W's tile times x's, on wgmma
    return dict(swap=True, block_n=64, block_k=256, num_stages=4) if n > 65536 else None


def sk_split(n, k):  # split-K for N <= 4096 (q/k/v, o, down, the per-layer-input gate): >= 2 waves of programs
    if n > 4096 or k < 1024:
        return None
    bn = 16 if n <= 512 else 32
    tiles, split = -(-n // bn), 1
    while tiles * split < 264 and k // (2 * split) >= 256 and split < 16:
        split *= 2
    return dict(block_n=bn, block_k=128, num_stages=4, split_k=split)


def _best_of(env: str, rows: int, first_k: bool = True):
    """fn(n, k) -> the fastest config of (n, k) at `rows` rows in the microbenchmark record named by $env
    (kselect.measurement.kernels.gemv's JSON, run on this card; several joined by os.pathsep, later ones winning),
    None where it has none. first_k: the GEMV's first
    chunk of one block (gemv's records ran that way)."""
    path = os.environ.get(env)
    if not path:
        raise ValueError(f"the tuned variants read a microbenchmark record: set {env} to its JSON")
    best = {(r["n"], r["k"]): dict(r["triton"]["cfg"]) for part in path.split(os.pathsep)
            for r in json.loads(Path(part).read_text())["rows"] if r["rows"] == rows and r.get("triton")}
    if rows == 1 and first_k:  # the GEMV's record ran each block_k with its first chunk of one block (kernels/gemv.py)
        for cfg in best.values():
            cfg["first_k"] = cfg["block_k"]
    return lambda n, k: best.get((n, k))


GEMV = {f.__name__: f for f in (small_whole_k, small_whole_k_n1, small_first_2048, wide_first_1024, chunks_2x, rows_2x,
                                 down_first_4096, combined, ahead_all, first_64, first_256)}
SKINNY = {f.__name__: f for f in (sk_bn32, sk_bk256, sk_st3, sk_wide32, sk_split, sk_swap_lm)}
# this card's microbenchmark record, fastest config per shape: the GEMV's at one row, the skinny GEMM's at 16
TUNED = {"tuned": ("KSELECT_GEMV_TABLE", 1), "sk_tuned": ("KSELECT_SKINNY_TABLE", 16)}
ROWS = {"cublas_rows": ((1, 1), None),  # 2 to 16 rows on cuBLAS: the code before kernels/skinny_gemm.py
        "skinny_all": ((1, 1), (2, 16), "all"),  # 2 to 16 rows on the skinny GEMM, every shape
        "skinny_one": (None, (1, 16), "all")}  # one row on the skinny GEMM too
# the add-norm before a one-row projection in that GEMV's prologue (kernels/add_norm_prologue.py; off by default)
FOLD = "fold"
# weights prefetched into L2 beside a decode step's graph (gemma4/fused.py PREFETCH), on or off whatever the default
PREFETCH = {"prefetch": True, "no_prefetch": False}
# the add-norm after a one-row projection in that GEMV's last program (gemma4/fused.py TAIL_NORMS), on or off
TAIL = {"tail_norms": True, "no_tail_norms": False}
# every 2- to 16-row projection on kernels/skinny_gemm.py, with split-K for the small ones (sk_split)
SPLIT = "sk_split_all"
# steps of up to 16 rows launch with programmatic dependent launch too (gemma4/fused.py PDL_MAX_TOKENS; default one)
PDL = {"pdl_b16": 16}
# kernels launched with PDL release the next kernel before they wait, not after (kernels/pdl.py `early`)
PDL_EARLY = "pdl_early"
# one-row projections on kernels/gemv_tma.py (gemma4/fused.py GEMV_TMA): its default configs, or this card's fastest
# in the microbenchmark record $KSELECT_GEMV_TMA_TABLE names (kselect.measurement.kernels.gemv --kernel gemv_tma)
TMA = {"tma": None, "tma_tuned": "KSELECT_GEMV_TMA_TABLE"}
# one-row gated projection pairs as one kernel (gemma4/fused.py GATED_PAIR): the second read in its own layout, or
# from transposed copies; with its default configs, or this card's fastest per layout in the microbenchmark record
# $KSELECT_PAIR_TABLE names (kselect.measurement.kernels.gated_pair)
PAIR = {"pair": ("n", False), "pair_t": ("t", False), "pair_tuned": ("n", True), "pair_t_tuned": ("t", True)}


# kernels/triton_paged.py reads its first key tile before the PDL wait (PREFETCH_KV): earlier steps' rows into
# registers, or every row's lines into L2
KV_PRE = {"kv_pre": "REGS", "kv_l2": "L2"}
# a small decode's attention launch (kernels/triton_paged.py SMALL): split at most n ways (default 64), 8 warps a
# program (default 4), one pipeline stage (default 2), 16-key tiles (default 32); attn_b16*: the small launch up to
# batch 16 (default 4), with about 1, 2 or 4 programs an SM (default 1)
SMALL_LAUNCH = {**{f"splits{n}": dict(splits=n) for n in (1, 2, 4, 8)}, "attn_w8": dict(warps=8),
                "attn_s1": dict(stages=1), "attn_n16": dict(block_n=16), "attn_b16": dict(batch=16),
                "attn_b16_x2": dict(batch=16, per_sm=2), "attn_b16_x4": dict(batch=16, per_sm=4)}
# an add-norm launched with PDL reads its residual before the wait (kernels/rms_norm.py RES_EARLY)
RES_EARLY = "res_early"
# the per-layer-input block and the add-norms around it as one kernel with a grid barrier (gemma4/fused.py PLE_BLOCK)
PLE_BLOCK = "ple_block"
# ... with other launch parameters (kernels/ple_block.py `configured`: gate rows, projection rows, warps a program)
PLE_CONFIGS = {"ple_p80": (4, 32, 4), "ple_w8": (4, 32, 8)}
# an add-norm with a next norm folded into the one-row projection that reads it (gemma4/fused.py NORM_FOLD), and that
# projection's other launch parameters (kernels/gemv_fold.py `configured`: rows a program, K chunk, warps)
NORM_FOLD = "norm_fold"
FOLD_CONFIGS = {"fold_n4": (4, 512, 4), "fold_k256": (8, 256, 4)}
# a small decode's split attention merges in its last program, not in a kernel of its own (kernels/split_merge.py)
MERGE_LAST = "merge_last"
# a small decode's attention programs start lean: no early exit, the first tile's block ids before q
# (kernels/triton_paged.py LEAN_START)
ATTN_LEAN = "attn_lean"
# ... and its positions in 32 bits (kernels/triton_paged.py POSITIONS_32)
ATTN_POS32 = "attn_pos32"
# ... and its cache offsets in 32 bits, a position's block and row by unsigned division (kernels/triton_paged.py
# OFFSETS_32)
ATTN_OFF32 = "attn_off32"
# a 2- to 16-row projection launched with PDL asks L2 for its first 2 or 4 K tiles of W before it waits
# (kernels/skinny_gemm.py PREFETCH_W; off by default): with pdl_b16 at batch 16
SK_W_L2 = {"sk_w_l2": 2, "sk_w_l2_4": 4}
# ... and a one-row projection (kernels/gemv.py PREFETCH_W) its 2 or 4 K chunks after the first, held in registers
GEMV_W_L2 = {"gemv_w_l2": 2, "gemv_w_l2_4": 4}
# the paired GeGLU projection reads both halves' tiles in one K loop, at 2 to 16 rows (kernels/skinny_gemm.py
# PAIR_ONE_LOOP; off by default) or at one row (kernels/gemv.py PAIR_ONE_LOOP; on the H100 by default)
SK_PAIR1, GEMV_PAIR1 = "sk_pair1", "gemv_pair1"
# the batch-1 switches a card's rule turns on (kernels/triton_paged.py PDL_DECODE_BY_CARD, kernels/gemv.py
# PAIR_ONE_LOOP_CARDS) all off, whatever the card: the code before bench/results/h100/pair1/
B1_OFF = "b1_off"
# the batch-16 switches a card's rule turns on (gemma4/fused.py PDL_TOKENS_BY_CARD, kernels/skinny_gemm.py
# PREFETCH_W_BY_CARD, kernels/triton_paged.py SMALL_WIDE_BY_CARD) all off, whatever the card: the code before
# bench/results/h100/b16_rule/
B16_OFF = "b16_off"
# ... and the small attention launch only up to batch 4 (kernels/triton_paged.py SMALL_BATCH_BY_CARD ignored): the code
# before the H200's rule (bench/results/h200/b16_rule/); on the H100, before bench/results/h100/attn_b16/ too
B16_NONE = "b16_none"
# q/k/v's norms, rope and KV write inside the attention kernel at one new token a sequence (gemma4/fused.py
# QKV_IN_ATTENTION, kernels/attn_qkv.py): one kernel a layer fewer
ATTN_QKV = "attn_qkv"
# PDL kernels with a late point (the add-norm, the split merge) release the next kernel after their reads
# (kernels/pdl.py `late`)
PDL_LATE = "pdl_late"
# the add-norm kernel with 2, 4 or 16 warps a row, not one per 512 columns (kernels/rms_norm.py ROW_WARPS; 8 at E4B's
# 2560)
NORM_WARPS = {f"norm_w{n}": n for n in (2, 4, 16)}
# every projection's W loads evict-first in L2, so the KV cache and activations stay there (kernels/w_evict.py)
W_EVICT = "w_evict"


def _pair_best(layout: str):
    """fn(inter, k) -> the record's fastest config of that pair in `layout` (programs per SM made a count)."""
    import torch

    path = os.environ.get("KSELECT_PAIR_TABLE")
    if not path:
        raise ValueError("the tuned pair variants read a microbenchmark record: set KSELECT_PAIR_TABLE to its JSON")
    record = json.loads(Path(path).read_text())
    sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else record["sms"]
    best = {(r["inter"], r["k"]): dict(r[f"pair_{layout}"]["cfg"]) for r in record["rows"] if r.get(f"pair_{layout}")}
    for cfg in best.values():
        cfg["programs"] *= sms
    return lambda inter, k: best.get((inter, k))


def _all(*switches) -> contextlib.ExitStack:
    """Every switch entered, left together (a card's rule turned off)."""
    stack = contextlib.ExitStack()
    for switch in switches:
        stack.enter_context(switch)
    return stack


def variant(name: str):
    """The context a variant's step runs (and its graphs are captured) in; "a+b": both variants' contexts."""
    from kselect.gemma4 import fused
    from kselect.kernels import gemv, skinny_gemm

    if "+" in name:
        stack = contextlib.ExitStack()
        try:
            for part in name.split("+"):
                stack.enter_context(variant(part))
        except BaseException:
            stack.close()  # a part that refuses leaves nothing switched
            raise
        return stack
    if name in PDL:
        return fused.pdl_tokens(PDL[name])
    if name == PDL_EARLY:
        from kselect.kernels import pdl

        return pdl.early(True)
    if name == PDL_LATE:
        from kselect.kernels import pdl

        return pdl.late(True)
    if name in TMA:
        from kselect.kernels import gemv_tma

        best = _best_of(TMA[name], 1, first_k=False) if TMA[name] else None  # refuses before anything is switched
        both = contextlib.ExitStack()
        both.enter_context(fused.gemv_tma(True))
        if best:
            both.enter_context(gemv_tma.configured(best))
        return both
    if name in KV_PRE:
        from kselect.kernels import triton_paged

        return triton_paged.prefetch_kv(getattr(triton_paged, KV_PRE[name]))
    if name in SMALL_LAUNCH:
        from kselect.kernels import triton_paged

        return triton_paged.small_launch(**SMALL_LAUNCH[name])
    if name == RES_EARLY:
        from kselect.kernels import rms_norm

        return rms_norm.res_before_wait(True)
    if name == PLE_BLOCK:
        return fused.ple_block(True)
    if name == NORM_FOLD:
        return fused.norm_fold(True)
    if name in FOLD_CONFIGS:
        from kselect.kernels import gemv_fold

        return gemv_fold.configured(*FOLD_CONFIGS[name])
    if name in PLE_CONFIGS:
        from kselect.kernels import ple_block

        return ple_block.configured(*PLE_CONFIGS[name])
    if name in SK_W_L2:
        return skinny_gemm.prefetch_w(SK_W_L2[name])
    if name in GEMV_W_L2:
        return gemv.prefetch_w(GEMV_W_L2[name])
    if name == SK_PAIR1:
        return skinny_gemm.pair_one_loop(True)
    if name == GEMV_PAIR1:
        return gemv.pair_one_loop(True)
    if name in NORM_WARPS:
        from kselect.kernels import rms_norm

        return rms_norm.warps_per_row(NORM_WARPS[name])
    if name == B1_OFF:
        from kselect.kernels import triton_paged

        return _all(triton_paged.prefetch_kv(triton_paged.OFF), triton_paged.lean_start(False),
                    triton_paged.positions_32(False), gemv.pair_one_loop(False))
    if name in (B16_OFF, B16_NONE):
        from kselect.kernels import triton_paged

        small = dict(per_sm=1, batch=triton_paged.SMALL_BATCH) if name == B16_NONE else dict(per_sm=1)
        return _all(fused.pdl_tokens(1), skinny_gemm.prefetch_w(0), triton_paged.small_launch(**small),
                    triton_paged.offsets_32(False))
    if name == ATTN_QKV:
        return fused.qkv_in_attention(True)
    if name == W_EVICT:
        from kselect.kernels import w_evict

        return w_evict.evict_first(True)
    if name == ATTN_LEAN:
        from kselect.kernels import triton_paged

        return triton_paged.lean_start(True)
    if name == ATTN_POS32:
        from kselect.kernels import triton_paged

        return triton_paged.positions_32(True)
    if name == ATTN_OFF32:
        from kselect.kernels import triton_paged

        return triton_paged.offsets_32(True)
    if name == MERGE_LAST:
        from kselect.kernels import split_merge

        return split_merge.merge_last(True)
    if name in PAIR:
        from kselect.kernels import gated_pair

        layout, tuned = PAIR[name]
        best = _pair_best(layout) if tuned else None  # refuses before anything is switched
        both = contextlib.ExitStack()
        both.enter_context(fused.gated_pair(layout))
        if best:
            both.enter_context(gated_pair.configured(best))
        return both
    if name in GEMV:
        return gemv.configured(GEMV[name])
    if name in SKINNY:
        return skinny_gemm.configured(SKINNY[name])
    if name == FOLD:
        return fused.fold_norms(True)
    if name in PREFETCH:
        return fused.prefetching(PREFETCH[name])
    if name in TAIL:
        return fused.tail_norms(TAIL[name])
    if name == SPLIT:  # every 2- to 16-row projection on the skinny GEMM, split-K where sk_split says
        both = contextlib.ExitStack()
        both.enter_context(fused.projection_rows((1, 1), (2, 16), "all"))
        both.enter_context(skinny_gemm.configured(sk_split))
        return both
    if name in TUNED:
        env, rows = TUNED[name]
        return (gemv if rows == 1 else skinny_gemm).configured(_best_of(env, rows))
    return fused.projection_rows(*ROWS[name])


VARIANTS = {**GEMV, **SKINNY, **TUNED, **ROWS, FOLD: None, **PREFETCH, **TAIL, SPLIT: None, **PDL, PDL_EARLY: None,
            **TMA, **PAIR, **KV_PRE, MERGE_LAST: None, ATTN_LEAN: None, ATTN_POS32: None, ATTN_OFF32: None,
            RES_EARLY: None, PLE_BLOCK: None, **PLE_CONFIGS, NORM_FOLD: None, **FOLD_CONFIGS, **SMALL_LAUNCH,
            **SK_W_L2, **GEMV_W_L2, SK_PAIR1: None, GEMV_PAIR1: None, B1_OFF: None, B16_OFF: None, B16_NONE: None,
            **NORM_WARPS, ATTN_QKV: None, PDL_LATE: None, W_EVICT: None}


def check_modes(ap, modes: list[str]) -> None:
    """argparse's error (exit 2, one line) for the first mode naming no variant of this module."""
    for mode in modes:
        try:
            split_mode(mode)
        except ValueError as e:
            ap.error(str(e))


def split_mode(mode: str) -> tuple[str, str | None]:
    """"triton+small_whole_k" -> ("triton", "small_whole_k"); "triton+a+b" -> ("triton", "a+b") (both variants); a
    plain compute mode -> (mode, None). Run a step inside `variant(name)`."""
    compute, plus, name = mode.partition("+")
    if not plus:
        return mode, None
    for part in name.split("+"):
        if part not in VARIANTS:
            raise ValueError(f"projection variant {part!r} in mode {mode!r}: use one of {', '.join(VARIANTS)}")
    return compute, name
