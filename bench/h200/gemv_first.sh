#!/bin/bash
# Issue #16 (and #17's 31B batch-16 cells), H200 window of 2026-12-02 (tenth session). From the checkout root after
# the device-kernels activate step:
#
#   bash bench/h200/gemv_first.sh S   # ~3 min: the GEMV GPU tests (the first chunk's width is new), then E4B batch-1
#                                     #   decode with each GEMV launch variant of bench/gemma4/gemv_variants.py
#                                     #   against the shipped configs (triton), two alternated passes, Triton attention
#   bash bench/h200/gemv_first.sh B   # ~6 min: e2e 31B at batch 16 only, bf16 and FP8, every selection (the cells the
#                                     #   last E1 ran out of budget for; FlashInfer JIT-compiles on a fresh machine)
set -u
PART=${1:?usage: gemv_first.sh S|B}
OUT=${OUT:-/tmp/gemv_first_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
case $PART in
S)
  say "GPU: kernels/gemv tests"
  timeout 120 python3 -m pytest -q -m "gpu or not gpu" -rs -p no:cacheprovider tests/kernels/test_gemv.py \
    > "$OUT/gpu_tests_gemv.log" 2>&1
  tail -2 "$OUT/gpu_tests_gemv.log"
  V=(small_whole_k small_whole_k_n1 small_first_2048 wide_first_1024 down_first_4096 combined)
  FWD=(triton); REV=()
  for v in "${V[@]}"; do FWD+=("triton+$v"); REV=("triton+$v" "${REV[@]}"); done
  say "fusion: E4B B1, the shipped GEMV configs vs each variant, two passes (forward, then reversed)"
  timeout $((${UNTIL:-300} - (SECONDS - START))) python3 bench/gemma4/fusion.py --out "$OUT/S4" --presets gemma4_e4b \
    --modes "${FWD[@]}" "${REV[@]}" triton --selection pin_triton --compile-presets --fp8-presets --batches 1 --no-hf \
    --long 1 --budget-s $((${UNTIL:-300} - 15 - (SECONDS - START))) 2>&1 | grep "^\[" | grep "B1\|FAILED"
  ;;
B)
  say "e2e 31B, batch 16 only, bf16 and FP8, every selection"
  timeout $((${UNTIL:-560} - (SECONDS - START))) python3 bench/gemma4/e2e.py --out "$OUT/e2e_31b_b16" \
    --presets gemma4_31b --rules vllm_0_33_0 --no-numerics --new 64 --reps 3 --prompt-len 512 --batches 16 \
    --kv auto fp8 --selections "${SELS[@]}" --no-hf --budget-s $((${UNTIL:-560} - 20 - (SECONDS - START))) 2>&1 \
    | grep -v Warning | grep "^\[" | grep "B16\|FAILED\|skipped" | tail -20
  sed -n '/## Objectives/,$p' "$OUT/e2e_31b_b16/e2e.md" | grep "decode B16"
  ;;
esac
say "done"
