#!/bin/bash
# Issue #16/#17, H200 window of 2026-12-01 (eighth session): the Triton decode kernel's split count at the
# model steps' small batches. From the checkout root after the device-kernels activate step:
#
#   bash bench/h200/decode_splits.sh S   # ~4 min: bench/kernels/tune_triton_decode.py --small, bf16 and FP8:
#                                        #   B1 (and B4) x 544 for 31B / E4B, split into 1-4 key tiles a program
#   bash bench/h200/decode_splits.sh T   # ~1 min: the Triton kernels' GPU tests
set -u
PART=${1:?usage: decode_splits.sh S|T}
OUT=${OUT:-/tmp/splits_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
case $PART in
S)
  say "tune_triton_decode --small"
  timeout 330 python3 bench/kernels/tune_triton_decode.py --out "$OUT" --small --dtypes bf16,fp8 --budget-s 300 \
    --copy-gbs 4209 | grep "BEST\|error" ;;
T)
  say "GPU tests: Triton attention and the backend"
  timeout 200 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_triton_paged.py \
    > "$OUT/gpu_tests_triton.log" 2>&1; tail -4 "$OUT/gpu_tests_triton.log" ;;
esac
say "done"
