#!/bin/bash
# Issues #16/#17, H200 window of 2026-12-01 (seventh session). From the checkout root after the device-kernels
# activate step:
#
#   bash bench/h200/prefill_gemv.sh G   # ~1.5 min: bench/kernels/bench_gemv.py (cuBLAS vs kernels/gemv.py, B1
#                                       #   decode projections of E4B and 31B) and the GEMV GPU tests
#   bash bench/h200/prefill_gemv.sh P   # ~4 min: bucket_vs_step --phase prefill for 31B (vLLM's choice and
#                                       #   latency, bf16 and FP8): where explain's FP8 prefill falls short
#   bash bench/h200/prefill_gemv.sh P2  # ~1 min: P again for vLLM's choice (first-chunk prefill graphs)
#   bash bench/h200/prefill_gemv.sh F   # ~4 min: bench/gemma4/fusion.py, E4B then 31B, compute triton_cublas
#                                       #   (every projection on cuBLAS) vs triton (batch-1 projections on
#                                       #   kernels/gemv.py): decode B1/B16, profiles, greedy vs unfused
#   bash bench/h200/prefill_gemv.sh PF  # ~1.5 min: P2 with the prefill buckets also behind a layer fence (a
#                                       #   GEMM of the prompt's rows over one layer's weights before each call)
set -u
PART=${1:?usage: prefill_gemv.sh G|P|P2|F|PF}
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
P2)
  say "prefill after the first-chunk graphs: vLLM's choice, bf16 and FP8, 31B"
  timeout 150 python3 bench/gemma4/bucket_vs_step.py --phase prefill --out "$OUT/P2" --preset gemma4_31b \
    --prompt-len 512 --steps 3 --kv auto fp8 --selections vllm --max-seq-lens 520 > "$OUT/bvs_prefill2_31b.log" 2>&1
  grep "model prefill\|bucket, fence" "$OUT/P2/bucket_vs_step.md"
  ;;
PF)
  say "prefill buckets back to back and behind a layer fence, vLLM's choice, bf16 and FP8, 31B"
  timeout 200 python3 bench/gemma4/bucket_vs_step.py --phase prefill --out "$OUT/PF" --preset gemma4_31b \
    --prompt-len 512 --steps 3 --kv auto fp8 --selections vllm --max-seq-lens 520 --fences none layer:1024 \
    > "$OUT/bvs_prefill_fenced_31b.log" 2>&1
  grep "model prefill\|bucket, fence" "$OUT/PF/bucket_vs_step.md"
  ;;
F)
  say "fusion: triton_cublas vs triton (GEMV), E4B and 31B"
  timeout $((${UNTIL:-300} - (SECONDS - START))) python3 bench/gemma4/fusion.py --out "$OUT/F" \
    --presets gemma4_e4b gemma4_31b --modes triton_cublas triton --compile-presets --fp8-presets --batches 1 16 \
    --no-hf --long 64 --budget-s $((${UNTIL:-300} - 15 - (SECONDS - START))) 2>&1 | grep -v Warning | grep "^\[" | tail -30
  ;;
esac
say "done"
