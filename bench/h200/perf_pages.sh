#!/bin/bash
# Issue #17, H200 window of 2026-12-01 (third session): perf figures per kernel page. A kernel's speed
# depends on its page, and the objective now reads a figure only at the page a group runs
# (selector/evidence/perf_data.py bucket ids end in :p<page>; selector/measure/reachable.py lists the pages). Run from the
# checkout root after the device-kernels activate step, parts in order on one machine:
#
#   bash bench/h200/perf_pages.sh P    # ~5 min: `kselect perf` at every page the objective can reach for
#                                      #   31B and E4B (vLLM 0.33.0's rules and post-#52987's), up to 128
#   bash bench/h200/perf_pages.sh E1   # ~8 min: e2e 31B bf16 + FP8, explain vs the run
#   bash bench/h200/perf_pages.sh E2   # ~4 min: e2e E4B bf16 + FP8, explain vs the run
#
# Then (bench/gemma4/bucket_vs_step.py found B1 decode figures at a page-aligned 512 tokens unlike the
# model's 516-576: FA3's FP8 call 28 us at 512 against 21 us at 516 and 22 us at 1,024):
#   bash bench/h200/perf_pages.sh Q    # ~3 min: decode buckets at 544 tokens (mid-page, the e2e point), B1 and B16
#
# e2e options as bench/h200/request_layout.sh (objective resolved at each run's point and request), and
# e2e.py now also records the attention kernels' timeline share (kernels + the launch gap before each).
set -u
PART=${1:?usage: perf_pages.sh P|Q|E1|E2}
OUT=${OUT:-/tmp/perf_pages_out}
KEEP=${KEEP:-/tmp/kselect_perf_pages}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
E2E=("${E2E_WINDOW[@]}" --no-hf)
[ -f "$KEEP/perf.yaml" ] && [ "$PART" != P ] && cp "$KEEP/perf.yaml" conf/perf/$GPU.yaml

case $PART in
Q)
  say "perf: decode at 544 tokens, every verified kernel at every page the objective reaches (31B, E4B)"
  timeout 300 python3 -m kselect.perf --gpu-name $GPU --out conf/perf/$GPU.yaml \
    --models gemma4_31b,gemma4_e4b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN \
    --rules vllm_0_33_0,post_pr52987 --max-page 128 --decode 1x544,16x544 --prefill "" --reps 5 \
    --warm-jobs 12 --budget-s 280 2>&1 | grep -v "^warm .*: ok$" > "$OUT/perf.log"
  grep -c " ms graph" "$OUT/perf.log"; grep -v " ms graph" "$OUT/perf.log" | grep -v "^kselect: FlashInfer" | tail -30
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;;
P)
  say "perf: every verified kernel at every page the objective reaches (31B, E4B), all buckets"
  timeout $((590 - (SECONDS - START))) python3 -m kselect.perf --gpu-name $GPU --out conf/perf/$GPU.yaml \
    --models gemma4_31b,gemma4_e4b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN \
    --rules vllm_0_33_0,post_pr52987 --max-page 128 \
    --decode 1x512,16x512,1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --reps 5 \
    --warm-jobs 12 --budget-s $((560 - (SECONDS - START))) 2>&1 | grep -v "^warm .*: ok$" > "$OUT/perf.log"
  grep -c " ms graph" "$OUT/perf.log"; grep -v " ms graph" "$OUT/perf.log" | tail -30
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;;
E1|E2)
  case $PART in E2) m=e4b ;; *) m=31b ;; esac
  e2e_and_explain $m 500
  ;;
esac
say "done"
