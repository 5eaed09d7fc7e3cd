#!/bin/bash
# Issues #16/#17, H200 window of 2026-12-01 (seventh session). From the checkout root after the device-kernels
# activate step:
#
#   bash bench/h200/prefill_gemv.sh G   # ~1.5 min: bench/kernels/bench_gemv.py (cuBLAS vs kernels/gemv.py, B1
#                                       #   decode projections of E4B and 31B) and the GEMV GPU tests
#   bash bench/h200/prefill_gemv.sh P   # ~4 min: bucket_vs_step --phase prefill for 31B (vLLM's choice and
#                                       #   latency, bf16 and FP8): where explain's FP8 prefill falls short
set -u
PART=${1:?usage: prefill_gemv.sh G|P}
OUT=${OUT:-/tmp/pg_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
case $PART in
G)
  say "GEMV: cuBLAS vs Triton per config"
  timeout 240 python3 bench/kernels/bench_gemv.py --out "$OUT/gemv" --models e4b 31b --rows 1 > "$OUT/gemv.log" 2>&1
  tail -14 "$OUT/gemv.log"
  say "GEMV GPU tests"
  timeout 90 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_gemv.py 2>&1 | tail -3
  ;;
P)
  say "prefill: the engine's prefill graph beside each group's prefill bucket, 31B"
  timeout $((${UNTIL:-560} - (SECONDS - START))) python3 bench/gemma4/bucket_vs_step.py --phase prefill \
    --out "$OUT/P31" --preset gemma4_31b --prompt-len 512 --steps 3 --kv auto fp8 --selections vllm latency \
    --max-seq-lens 520 4608 > "$OUT/bvs_prefill_31b.log" 2>&1
  tail -3 "$OUT/bvs_prefill_31b.log"
  cp "$OUT/P31/bucket_vs_step.md" "$OUT/bucket_vs_step_prefill_31b.md" 2>/dev/null
  grep "model prefill\|bucket, fence" "$OUT/bucket_vs_step_prefill_31b.md"
  ;;
esac
say "done"
