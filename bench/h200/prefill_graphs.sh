#!/bin/bash
# Issues #16/#17, H200 window of 2026-12-01 (fourth session): prefill steps from CUDA graphs, decode
# figures over a context range. Run from the checkout root after the device-kernels activate step, parts
# in order on one machine:
#
#   bash bench/h200/prefill_graphs.sh T    # ~2 min: the GPU tests of prefill and decode graphs
#   bash bench/h200/prefill_graphs.sh S    # ~8 min: decode buckets at 544 tokens (the e2e point), each the mean
#                                          #   over contexts 510-578 (--context-spread 0.0625: a request's
#                                          #   512 + 64 decode steps), B1 and B16, every verified kernel at
#                                          #   every page the objective reaches for 31B and E4B
#   bash bench/h200/prefill_graphs.sh E1   # ~5 min: e2e 31B bf16 + FP8, explain vs the run
#   bash bench/h200/prefill_graphs.sh E2   # ~3 min: e2e E4B bf16 + FP8, explain vs the run
#
# e2e's B1 prefill (512 tokens) now replays a CUDA graph (gemma4/prefill_graph.py; `prefill_graph_steps`
# in e2e.json says it did); its --prefill-lens 4,096 runs stay eager (over the largest bucket).
set -u
PART=${1:?usage: prefill_graphs.sh T|S|E1|E2}
OUT=${OUT:-/tmp/prefill_graphs_out}
KEEP=${KEEP:-/tmp/kselect_prefill_graphs}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
E2E=("${E2E_WINDOW[@]}" --no-hf)
[ -f "$KEEP/perf.yaml" ] && [ "$PART" != S ] && cp "$KEEP/perf.yaml" conf/perf/$GPU.yaml

case $PART in
T)
  say "GPU tests: prefill graphs, decode graphs, speculative rounds"
  timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/gemma4/test_prefill_graph.py \
    tests/gemma4/test_engine.py tests/gemma4/test_spec_graphs.py 2>&1 | tail -30
  ;;
S)
  say "perf: decode at 544 tokens spread +-6.25%, every verified kernel at every reachable page (31B, E4B)"
  timeout $((590 - (SECONDS - START))) python3 -m kselect.perf --gpu-name $GPU --out conf/perf/$GPU.yaml \
    --models gemma4_31b,gemma4_e4b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN \
    --rules vllm_0_33_0,post_pr52987 --max-page 128 --decode 1x544,16x544 --context-spread 0.0625 --prefill "" \
    --reps 5 --warm-jobs 12 --budget-s $((560 - (SECONDS - START))) 2>&1 | grep -v "^warm .*: ok$" > "$OUT/perf.log"
  grep -c " ms graph" "$OUT/perf.log"; grep -v " ms graph" "$OUT/perf.log" | grep -v "^kselect: FlashInfer" | tail -30
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;;
E1|E2)
  case $PART in E2) m=e4b ;; *) m=31b ;; esac
  e2e_and_explain $m 520
  ;;
esac
say "done"
