#!/bin/bash
# Issue #17, H200 window of 2026-12-01 (fifth session): decode buckets timed as inside a model step. Run
# from the checkout root after the device-kernels activate step, parts in order on one machine:
#
#   bash bench/h200/fenced.sh D     # ~4 min: the prefill-graph GPU test (not FlashInfer); one bucket beside
#                                   #   one model step per fence kind (bench/gemma4/bucket_vs_step.py), 31B, E4B
#   bash bench/h200/fenced.sh P31   # ~4 min: `kselect perf --fence layer:<one layer's weights>` over the
#   bash bench/h200/fenced.sh P4    #   decode buckets at 544 tokens (B1, B16, spread +-6.25%) of 31B / E4B
#   bash bench/h200/fenced.sh Q31   # ~4 min: the same fence over 31B's prefill buckets (1x512, 1x4096): in
#   bash bench/h200/fenced.sh Q4    #   prefill the layer fence is a GEMM of the prompt's rows (kselect perf);
#                                   #   graph-timed prefill buckets also record the backend's host plan (plan_ms)
#   bash bench/h200/fenced.sh E1    # ~4 min: e2e 31B bf16 + FP8 on the fenced figures, explain vs the run
#   bash bench/h200/fenced.sh E2    # ~2 min: the same for E4B
#   bash bench/h200/fenced.sh TF    # the prefill-graph GPU test's FlashInfer cases (JIT compiles)
#
# The fence before each timed call is a bf16 GEMV over about one layer's weights (31B: 0.96 GB, E4B: 0.19 GB:
# q/k/v/o and gate/up/down, conf/model), the reads that separate two attention calls in a model step. P
# writes a copy of conf/perf ($KEEP/fenced.yaml); only when every target of that model was timed (no budget
# skip, no error) does it become the figures E1/E2 select on ($KEEP/perf.yaml). A group's candidates all
# have one model's shapes, so they are never a mix of fenced and back-to-back figures.
set -u
PART=${1:?usage: fenced.sh D|P31|P4|Q31|Q4|E1|E2|TF}
OUT=${OUT:-/tmp/fenced_out}
KEEP=${KEEP:-/tmp/kselect_fenced}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
E2E=("${E2E_WINDOW[@]}" --no-hf)
# layer: the calls' own kernels on the fenced graph's timeline (kselect/perf_timing.py calls_timeline_ms); the committed
# figures were timed with gemv (a difference of graph times, 12.7-18.8 us for one 16 us FA3 call in five
# timings: bench/results/h200/hf_mtp/D, L, R), layer gave 16.19-16.26 us (hf_mtp/T)
FENCE_31B=${FENCE_31B:-layer:1024}
FENCE_E4B=${FENCE_E4B:-layer:192}
DECODE=${DECODE:-1x544,16x544}  # the buckets P31/P4 time
# KERNELS=FLASH_ATTN_v3,TRITON_ATTN re-times only the paths a change moved (the rest of the file stays)
[ -f "$KEEP/perf.yaml" ] && cp "$KEEP/perf.yaml" conf/perf/$GPU.yaml

perf_fenced() {  # $1 model, $2 fence, $3 decode buckets, $4 prefill buckets
  [ -f "$KEEP/fenced.yaml" ] || cp conf/perf/$GPU.yaml "$KEEP/fenced.yaml"
  say "perf $1 --fence $2: decode ${3:-none} (spread +-6.25%), prefill ${4:-none}, every verified kernel at every reachable page"
  timeout $((${UNTIL:-590} - (SECONDS - START))) python3 -m kselect.perf --gpu-name $GPU --out "$KEEP/fenced.yaml" \
    --models $1 --kernels ${KERNELS:-FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN} --fence $2 \
    --rules vllm_0_33_0,post_pr52987 --max-page 128 --decode "$3" --context-spread 0.0625 --prefill "$4" \
    --reps 5 --warm-jobs 12 --budget-s $((${UNTIL:-590} - 50 - (SECONDS - START))) 2>&1 | grep -v "^warm .*: ok$" > "$OUT/perf_$1.log"
  grep -c " ms graph" "$OUT/perf_$1.log"; grep -v " ms graph" "$OUT/perf_$1.log" | grep -v "^kselect: FlashInfer" | tail -20
  cp "$KEEP/fenced.yaml" "$OUT/perf_fenced_$GPU.yaml"
  if grep -q "budget: skipped\|cannot build\|Error" "$OUT/perf_$1.log"; then
    # A model left part fenced would mix timings among one group's candidates: back to the last complete file.
    say "NOT complete: $1's fenced figures dropped, $KEEP/perf.yaml left as it was"
    cp "${KEEP}/perf.yaml" "$KEEP/fenced.yaml" 2>/dev/null || cp conf/perf/$GPU.yaml "$KEEP/fenced.yaml"
  else
    # Every candidate of a group shares its model's shapes, so one model fenced whole is consistent.
    cp "$KEEP/fenced.yaml" "$KEEP/perf.yaml"; say "$1 complete: E runs select on its fenced figures"
  fi
}

case $PART in
D)
  say "GPU test: prefill graphs (not FlashInfer)"
  timeout 120 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/gemma4/test_prefill_graph.py -k "not flashinfer" \
    > "$OUT/gpu_tests_prefill_graph.log" 2>&1; tail -4 "$OUT/gpu_tests_prefill_graph.log"
  say "one bucket beside one model step, per fence kind: 31B"
  timeout $((400 - (SECONDS - START))) python3 bench/gemma4/bucket_vs_step.py --out "$OUT/D31" --preset gemma4_31b \
    --prompt-len 540 --steps 8 --kv auto fp8 --fences none write:96 gemv:256 $FENCE_31B > "$OUT/bvs_31b.log" 2>&1
  cp "$OUT/D31/bucket_vs_step.md" "$OUT/bucket_vs_step_31b.md"; rm -rf "$OUT/D31"
  say "E4B"
  timeout $((580 - (SECONDS - START))) python3 bench/gemma4/bucket_vs_step.py --out "$OUT/D4" --preset gemma4_e4b \
    --prompt-len 540 --steps 8 --kv auto fp8 --fences none write:96 $FENCE_E4B gemv:1024 > "$OUT/bvs_e4b.log" 2>&1
  cp "$OUT/D4/bucket_vs_step.md" "$OUT/bucket_vs_step_e4b.md"; rm -rf "$OUT/D4"
  grep "model step\|bucket, fence" "$OUT"/bucket_vs_step_*.md
  ;;
P31) perf_fenced gemma4_31b $FENCE_31B "$DECODE" "" ;;
P4) perf_fenced gemma4_e4b $FENCE_E4B "$DECODE" "" ;;
Q31) perf_fenced gemma4_31b $FENCE_31B "" "${PREFILL:-1x512,1x4096}" ;;
Q4) perf_fenced gemma4_e4b $FENCE_E4B "" "${PREFILL:-1x512,1x4096}" ;;
E1|E2)
  case $PART in E2) m=e4b ;; *) m=31b ;; esac
  e2e_and_explain $m ${UNTIL_E:-520}
  ;;
TF)
  say "GPU test: prefill graphs, FlashInfer cases"
  timeout 560 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/gemma4/test_prefill_graph.py -k flashinfer \
    > "$OUT/gpu_tests_prefill_graph_flashinfer.log" 2>&1; tail -6 "$OUT/gpu_tests_prefill_graph_flashinfer.log"
  ;;
esac
say "done"
