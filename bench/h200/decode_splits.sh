#!/bin/bash
# Issue #16/#17, H200 window of 2026-12-01 (eighth session): the Triton decode kernel's split count at the
# model steps' small batches. From the checkout root after the device-kernels activate step:
#
#   bash bench/h200/decode_splits.sh S   # ~1-3 min: bench/kernels/tune_triton_decode.py --small, bf16 and FP8:
#                                        #   B1 (and B4) x 544 for 31B / E4B, split into 1-4 key tiles a program
#   bash bench/h200/decode_splits.sh T   # ~1 min: the GPU tests of the Triton and quantizing kernels
set -u
PART=${1:?usage: decode_splits.sh S|T}
OUT=${OUT:-/tmp/splits_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
case $PART in
S)
  say "tune_triton_decode --small"
  timeout 170 python3 bench/kernels/tune_triton_decode.py --out "$OUT" --small --dtypes bf16,fp8 --budget-s 150 \
    --copy-gbs 4209 | grep "BEST\|error" ;;  # the command of bench/results/h200/splits/S (60 s there)
T)
  say "GPU tests: Triton attention, q/k/v, quant-query and KV-write kernels"
  timeout 200 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_gpu_paths.py tests/kernels/test_qkv_rope.py \
    tests/kernels/test_quant_query.py tests/kernels/test_kv_write.py -k "triton or TRITON or qkv_rope or quant_query or kv_write" \
    > "$OUT/gpu_tests.log" 2>&1; tail -4 "$OUT/gpu_tests.log" ;;  # bench/results/h200/splits/T2
esac
say "done"
