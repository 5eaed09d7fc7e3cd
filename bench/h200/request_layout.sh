#!/bin/bash
# Issues #16/#17, H200 window of 2026-12-01 (second session): the request-weighted layout rule, host time
# of eager prefill calls, perf buckets read from HBM (cold L2), one-kernel quant-query and memoized
# descales. Run from the checkout root after the device-kernels activate step, parts in order:
#
#   bash bench/h200/request_layout.sh P   # ~7 min: GPU tests of the FP8 paths, every verified kernel's
#                                         #   buckets again (decode with 4x L2 of inputs, prefill + host_ms)
#   bash bench/h200/request_layout.sh E1  # ~9 min: e2e 31B bf16 + FP8
#   bash bench/h200/request_layout.sh E2  # ~9 min: e2e E4B bf16 + FP8, explain vs both runs
#
# After the host-bound step rule (kselect perf-steps; a fresh machine, conf/perf from part P committed):
#   bash bench/h200/request_layout.sh F   # ~6 min: `kselect perf-steps` for both models, e2e 31B
#   bash bench/h200/request_layout.sh F2  # ~3 min: e2e E4B, explain vs both runs
#
# e2e.py as bench/h200/objective_at_run.sh (objective=vllm, objective=latency resolved at each run's own
# point and request: decode B1/B16 x 544 after a 512 prompt with 64 new tokens, prefill 4,096 with none;
# every single-backend pin; fused compute, CUDA graphs in decode; B1 attention profiles of vllm and latency),
# without HF (its baseline is in objective_at_run/).
set -u
PART=${1:?usage: request_layout.sh P|E1|E2|F|F2}
OUT=${OUT:-/tmp/request_layout_out}
KEEP=${KEEP:-/tmp/kselect_request_layout}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
E2E=("${E2E_WINDOW[@]}" --no-hf)
# the perf file of part P, kept on the machine for the e2e parts (the checkout is copied afresh each call)
[ -f "$KEEP/perf.yaml" ] && [ "$PART" != P ] && cp "$KEEP/perf.yaml" conf/perf/$GPU.yaml

case $PART in
P)
  say "GPU tests: one-kernel quant-query, every FP8 path against the reference, graph decode == eager"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_quant_query.py \
    tests/kernels/test_gpu_paths.py tests/backends -rs 2>&1 | tail -12
  say "perf: every verified claim's kernel (not the reference or the vision composites), all buckets again"
  timeout $((590 - (SECONDS - START))) python3 -m kselect.perf --gpu-name $GPU --out conf/perf/$GPU.yaml \
    --models gemma4_31b,gemma4_e4b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN \
    --decode 1x512,16x512,1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --reps 5 \
    --warm-jobs 8 --budget-s $((560 - (SECONDS - START))) 2>&1 | grep -v "^warm " | tail -40
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;;
F)
  say "perf-steps: is each model's eager prefill step host- or GPU-bound?"
  timeout 150 python3 -m kselect.perf_steps --gpu-name $GPU --models gemma4_31b,gemma4_e4b --prefill 512,4096 2>&1 \
    | grep -v Warning | tail -8
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;&
E1|E2|F2)
  case $PART in E2|F2) m=e4b ;; *) m=31b ;; esac
  say "e2e $m"
  timeout $((500 - (SECONDS - START))) python3 bench/gemma4/e2e.py --out "$OUT/e2e_$m" --presets gemma4_$m \
    --budget-s $((480 - (SECONDS - START))) "${E2E[@]}" 2>&1 | grep -v Warning | tail -70
  cp -r "$OUT/e2e_$m" "$KEEP/"
  say "explain vs the run"
  timeout 60 python3 bench/h200/explain_vs_e2e.py --e2e "$OUT/e2e_$m/e2e.json" --model gemma4_$m \
    --out "$OUT/explain_$m.md" > /dev/null 2>&1 && tail -12 "$OUT/explain_$m.md"
  ;;
esac
say "done"
