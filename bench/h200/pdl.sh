#!/bin/bash
# Issue #16, H200 window of 2026-12-02 (ninth session): programmatic dependent launch (kernels/pdl.py) and GELU*up
# in the batch-1 GEMV's epilogue. From the checkout root after the device-kernels activate step:
#
#   bash bench/h200/pdl.sh T   # ~2 min: every test of the kernels PDL touched, on the GPU (their small-shape tests
#                              #   too: test_kv_write's bit-strict write after tl.div_rn), and the Triton attention
#                              #   GPU paths
#   bash bench/h200/pdl.sh F   # ~8 min: bench/gemma4/fusion.py, E4B then 31B on the Triton attention backend, compute
#                              #   triton_serial (plain launches) vs triton (PDL): decode B1/B16, profiles, greedy
#                              #   tokens at batch 1 vs the unfused modules with bf16 and FP8 caches
#   bash bench/h200/pdl.sh R   # ~3 min: next window: the rule as shipped (PDL at E4B's one-token steps only) against
#                              #   plain launches, and PDL at 31B's one-token steps (--pdl-max-layer-gb 2), alternated
# then fenced.sh Q4, E2, E1 (the #16/#17 e2e runs on these kernels). This window (bench/results/h200/pdl/) ran T, F,
# Q4, E2, E1 at 09d936f, where "triton" launched every step with PDL.
set -u
PART=${1:?usage: pdl.sh T|F|R}
OUT=${OUT:-/tmp/pdl_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
case $PART in
T)
  say "GPU: the kernels' tests (all of them), Triton attention paths"
  timeout 300 python3 -m pytest -q -m "gpu or not gpu" -rs -p no:cacheprovider tests/kernels/test_gemv.py \
    tests/kernels/test_pdl.py tests/kernels/test_gelu_mul.py tests/kernels/test_rms_norm.py tests/kernels/test_qkv_rope.py \
    tests/kernels/test_kv_write.py tests/kernels/test_quant_query.py tests/kernels/test_embedding.py \
    tests/kernels/test_rope_tables.py tests/kernels/test_slot_mapping.py > "$OUT/gpu_tests_kernels.log" 2>&1
  tail -4 "$OUT/gpu_tests_kernels.log"
  timeout 200 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_gpu_paths.py -k "triton or TRITON" \
    > "$OUT/gpu_tests_triton_paths.log" 2>&1
  tail -3 "$OUT/gpu_tests_triton_paths.log"
  timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/gemma4/test_hf_parity.py -k rope_tables 2>&1 | tail -2
  ;;
F)
  say "fusion: triton_serial vs triton (PDL), E4B and 31B, Triton attention"
  timeout $((${UNTIL:-560} - (SECONDS - START))) python3 bench/gemma4/fusion.py --out "$OUT/F" \
    --presets gemma4_e4b gemma4_31b --modes triton_serial triton --selection pin_triton --compile-presets \
    --fp8-presets gemma4_31b --batches 1 16 --no-hf --long 128 --greedy-batch 1 --greedy-kv auto fp8 \
    --budget-s $((${UNTIL:-560} - 15 - (SECONDS - START))) 2>&1 | grep -v Warning | grep "^\[" | tail -30
  ;;
R)
  say "fusion: the shipped PDL rule vs plain, E4B; 31B with PDL at one-token steps vs plain, alternated"
  timeout 150 python3 bench/gemma4/fusion.py --out "$OUT/R4" --presets gemma4_e4b --modes triton_serial triton \
    triton_serial triton --selection pin_triton --compile-presets --fp8-presets --batches 1 16 --no-hf --long 1 \
    --budget-s 140 2>&1 | grep "^\[" | grep "B1\|B16"
  timeout 200 python3 bench/gemma4/fusion.py --out "$OUT/R31" --presets gemma4_31b --modes triton_serial triton \
    triton_serial triton --selection pin_triton --compile-presets --fp8-presets --batches 1 --no-hf --long 1 \
    --pdl-max-layer-gb 2 --budget-s 190 2>&1 | grep "^\[" | grep "B1"
  ;;
esac
say "done"
