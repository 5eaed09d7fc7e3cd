"""What E4B's batch-1 attention costs as a dependent step on its own (issue #52).

docs/performance.md: against the 1.28 us a dependent step costs under PDL (probes/sync_floor.py), the batch-1 step's
attention and its merge take 9.2 us a layer in the step (7.16 + 2.03, bench/results/h100/ple_block/call1/T/). This
asks whether that is the kernels' own chain or what the step around them adds (other kernels' code, their traffic):
kselect's Triton decode attention (kernels/triton_paged.py, the small launch, its merge kernel after it) called N
times in a row in one CUDA graph, each call on its own KV set (SETS of them, more than L2 holds, so keys come from
HBM as in the step), timed as the slope between N = STEPS[0] and STEPS[1] calls. On the H200 it is their own chain:
8.7-8.9 us a call alone, as in that card's step (bench/results/h200/attn_floor/). Modes:

- `plain`: launched plainly; `pdl`: with PDL, as the step launched it before the H100's rule (each switch below
  off, whatever kernels/triton_paged.py PDL_DECODE_BY_CARD says);
- `pdl_kv_l2`: with PDL and the first tile asked of L2 before the wait (kernels/triton_paged.py PREFETCH_KV = L2);
- `pdl_hot`: with PDL, every call on the same KV set (keys from L2: what HBM's latency adds);
- `pdl_lean`: with PDL and the lean start (kernels/triton_paged.py LEAN_START: one dependent round trip fewer);
- `pdl_pos32`: with PDL and 32-bit positions (kernels/triton_paged.py POSITIONS_32: fewer instructions);
- `gemv`: E4B's o_proj GEMV alone (kernels/gemv.py, PDL), its W cycling over WSETS copies (from HBM, as in the step);
- `pdl_gemv`: the attention, its merge and that GEMV, as the step runs them. Its slope less `gemv`'s is what the pair
  costs beside another kernel's code and traffic (the `in step` column).

    python3 -m kselect.measurement.probes.attn_floor --out $OUT/A

Writes --out/attn_floor.json and attn_floor.md (atomically) with the command, commit, card and versions. Each case's
output is first checked against kernels/reference.py (on CPU, `check` runs in the interpreter at a shorter context).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from kselect.kernels import pdl
from kselect.kernels.gemv import gemv
from kselect.kernels import triton_paged as tp
from kselect.kernels.reference import paged_attention
from kselect.measurement.kernel_timing import make_inputs, time_graph
from kselect.measurement.probes.record import record, slope

HQ, HKV, KV_LEN = 8, 2, 520  # E4B's heads, the step's context (a 512-token prompt and the tokens decoded)
CASES = {"sliding": dict(d=256, window=512), "full": dict(d=512, window=None)}  # E4B's two layer kinds
HIDDEN = 2560  # E4B's o_proj: [HIDDEN, HQ x d]
MODES = ("plain", "pdl", "pdl_kv_l2", "pdl_hot", "pdl_lean", "pdl_pos32", "gemv", "pdl_gemv")
STEPS = (8, 64)
SETS = 64  # 64 x 1.1 MB (sliding) or 2.1 MB (full) of K and V: more than the H100's 50 MB L2
WSETS = 8  # 8 x 10.5 MB (sliding) or 21 MB (full) of o_proj W: more than L2 too
TOL = 2e-2


def call(inp: dict, prefetch=None) -> torch.Tensor:
    """One batch-1 decode attention call on one input set (kernels/triton_paged.py, its own launch choice)."""
    return tp.paged_attention_triton(inp["q"], inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"],
                                     inp["scale"], max_seqlen_q=inp["max_q"], max_seqlen_k=inp["max_k"],
                                     window_left=inp["window_left"], prefetch=prefetch)


class WrongResult(Exception):
    """A timed call's output is not the reference's: its timing would be of the wrong work."""


def inputs(case: str, sets: int, kv_len: int, page: int, device: str) -> list[dict]:
    c = CASES[case]
    return [make_inputs(HQ, HKV, c["d"], c["window"], 1, kv_len, 1, page, False, device) for _ in range(sets)]


def rel_err(got: torch.Tensor, inp: dict) -> float:
    """got's largest error against kernels/reference.py on inp, relative to the reference's largest value."""
    want = paged_attention(inp["q"], inp["k"], inp["v"], inp["cu"], inp["seqused"], inp["table"], inp["scale"],
                           window_left=inp["window_left"]).float()
    return float(((got.float() - want).abs().max() / want.abs().max()).item())


def weights(case: str, sets: int, device: str, hidden: int = HIDDEN) -> list[torch.Tensor]:
    """`sets` o_proj weights of the case's shape, [hidden, HQ x d] bf16."""
    return [torch.randn(hidden, HQ * CASES[case]["d"], device=device, dtype=torch.bfloat16) * 0.02
            for _ in range(sets)]


def check(case: str, device: str, kv_len: int = KV_LEN, page: int = 16) -> float:
    """rel_err of one call on a fresh input set."""
    inp = inputs(case, 1, kv_len, page, device)[0]
    return rel_err(call(inp), inp)


def chain(mode: str, sets: list[dict], n: int, ws: list[torch.Tensor] = ()) -> tuple[torch.Tensor, dict]:
    """n calls in a row, call i on set i % len(sets) (set 0 throughout for `pdl_hot`), launched the `mode` way, each
    followed by a GEMV on ws[i % len(ws)] in the `*gemv` modes: the last attention call's output (the last GEMV's in
    `gemv`, which runs no attention) and its set."""
    if mode not in MODES:
        raise ValueError(f"attn_floor mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode.endswith("gemv") and not ws:
        raise ValueError(f"attn_floor mode {mode} needs the o_proj weights (ws)")
    prefetch = tp.L2 if mode == "pdl_kv_l2" else tp.OFF  # explicit: not the card's rule (PDL_DECODE_BY_CARD)
    x = sets[0]["q"].reshape(1, -1)  # the GEMV-only chain's input: an attention output's shape
    with (pdl.off() if mode == "plain" else pdl.on(), tp.lean_start(mode == "pdl_lean"),
          tp.positions_32(mode == "pdl_pos32")):
        for i in range(n):
            inp = sets[0 if mode == "pdl_hot" else i % len(sets)]
            if mode != "gemv":
                out = call(inp, prefetch)
            if mode.endswith("gemv"):
                y = gemv(x if mode == "gemv" else out.reshape(1, -1), ws[i % len(ws)])
    return (y if mode == "gemv" else out), inp


def measure(page: int, reps: int) -> list[dict]:
    return [_case(case, page, reps) for case in CASES]  # one case's KV sets and weights freed before the next's


def _case(case: str, page: int, reps: int) -> dict:
    sets = inputs(case, SETS, KV_LEN, page, "cuda")
    row = dict(case=case, page=page, rel_err=check(case, "cuda", KV_LEN, page))
    if not row["rel_err"] <= TOL:
        raise WrongResult(f"attn_floor: the {case} call differs from kernels/reference.py by {row['rel_err']:.2e} "
                          f"(more than {TOL}); nothing timed or written")
    ws = weights(case, WSETS, "cuda")
    for mode in MODES:
        row[mode] = slope(lambda n: time_graph([lambda: chain(mode, sets, n, ws)], reps) * 1000, STEPS, "us_call")
    row["in_step"] = row["pdl_gemv"]["us_call"] - row["gemv"]["us_call"]
    return row


def render(rows: list[dict], env: dict) -> str:
    lo, hi = STEPS
    out = [f"# E4B's batch-1 attention as a dependent step on its own: {env.get('gpu', '?')}", "",
           f"`{env['command']}` at `{env['git_commit']}`", "",
           f"us a call (the attention and its merge): the slope between {lo} and {hi} calls in one CUDA graph (median "
           f"of replays), batch 1, {HQ} query and {HKV} KV heads, {KV_LEN} keys, each call on its own of {SETS} KV "
           f"sets except `pdl_hot`; `gemv` is E4B's o_proj alone ({WSETS} weights), `pdl_gemv` the pair and it, "
           "`in step` their difference: the pair beside the GEMV.", "",
           "| layer kind | page | " + " | ".join(f"`{m}`" for m in MODES) + " | in step | rel err |",
           "|---|---:|" + "---:|" * len(MODES) + "---:|---:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['page']} | " + " | ".join(f"{r[m]['us_call']:.2f}" for m in MODES)
                   + f" | {r['in_step']:.2f} | {r['rel_err']:.1e} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kselect.measurement.probes.attn_floor",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for attn_floor.json and attn_floor.md")
    ap.add_argument("--page", type=int, default=16, help="KV page size in tokens (default 16)")
    ap.add_argument("--reps", type=int, default=100, help="graph replays a point (median)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps must be at least 1, got {args.reps}")
    if args.page < 1 or args.page & (args.page - 1):
        ap.error(f"--page must be a power of two, got {args.page}")
    try:
        return record("attn_floor", argv, args.out, lambda: measure(args.page, args.reps), render, steps=STEPS,
                      sets=SETS)
    except WrongResult as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
