#!/bin/bash
# Issues #16 and #17, H200 window of 2026-12-01 (sixth session). Run from the checkout root after the
# device-kernels activate step, parts in order on one machine:
#
#   bash bench/h200/hf_mtp.sh E1H   # ~8 min: e2e 31B bf16 + FP8 as fenced.sh E1, now with HF in the same run
#                                   #   (logits check, B1/B16 decode, prefill 512 and 4,096), the B1 prefill
#                                   #   profile, then explain vs the run (decode and prefill)
#   bash bench/h200/hf_mtp.sh D     # ~4 min: one bucket beside one model step, 31B (bench/gemma4/bucket_vs_step.py),
#                                   #   back to back and fenced as conf/perf; then the prefill-graph GPU test,
#                                   #   every cell (FlashInfer JIT included), graph and eager against fp32
#   bash bench/h200/hf_mtp.sh M     # ~5 min: speculative decoding (k = 4) vs plain under CUDA graphs, 31B B1,
#                                   #   on `objective=latency` at the e2e point, then pinned to Triton
#   bash bench/h200/hf_mtp.sh L     # ~6 min: D found FA3 bf16's fenced figure 3 us a call under its kernels'
#                                   #   time. The bucket beside the step again with the gemv and the layer fence
#                                   #   (kselect/perf_timing.py make_fence; since b179152 a layer-fenced figure is the
#                                   #   calls' kernels on the graph's timeline), then 31B's B1 buckets re-timed
#                                   #   with it (fenced.sh P31, ~5 min with FlashInfer's JIT on a fresh machine:
#                                   #   give it UNTIL=560); `bash bench/h200/fenced.sh E1` after it
set -u
PART=${1:?usage: hf_mtp.sh E1H|D|M|L}
OUT=${OUT:-/tmp/hf_mtp_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
POINT=(objective.decode.batch=1 objective.decode.context=544 objective.prefill.context=512 objective.new_tokens=64)

case $PART in
E1H)
  E2E=("${E2E_WINDOW[@]}")  # HF's 512-token prefill is its B1 run's; 4,096 from --prefill-lens
  e2e_and_explain 31b 560
  ;;
D)
  say "one bucket beside one model step: 31B, B1 decode at 544 tokens"
  timeout 300 python3 bench/gemma4/bucket_vs_step.py --out "$OUT/D31" --preset gemma4_31b --prompt-len 540 \
    --steps 8 --kv auto fp8 --fences none gemv:1024 > "$OUT/bvs_31b.log" 2>&1
  cp "$OUT/D31/bucket_vs_step.md" "$OUT/bucket_vs_step_31b.md"; rm -rf "$OUT/D31"
  grep "model step\|bucket, fence" "$OUT/bucket_vs_step_31b.md"
  say "GPU test: prefill graphs, every cell"
  timeout $((580 - (SECONDS - START))) python3 -m pytest -q -s -m gpu -rs -p no:cacheprovider \
    tests/gemma4/test_prefill_graph.py > "$OUT/gpu_tests_prefill_graph.log" 2>&1
  grep "prefill logits vs fp32\|passed\|failed\|Error" "$OUT/gpu_tests_prefill_graph.log" | tail -30
  ;;
M)
  for tag in latency triton; do
    case $tag in latency) sel="objective=latency ${POINT[*]}"; until=300 ;; *) sel=attention.backend=TRITON_ATTN; until=580 ;; esac
    say "MTP k=4 vs plain, 31B B1, $sel"
    timeout $((until - (SECONDS - START))) python3 bench/gemma4/bench_mtp.py platform=sm90 \
      model=gemma4_31b rules=vllm_0_33_0 $sel --out "$OUT/mtp_$tag" --batch 1 --prompt-len 512 --new 64 --k 4 \
      --repeats 3 --no-fp8 --inits random,copy > "$OUT/mtp_$tag.log" 2>&1
    tail -15 "$OUT/mtp_$tag.log"; cp "$OUT/mtp_$tag/bench_mtp.json" "$OUT/mtp_$tag.json" 2>/dev/null
    rm -rf "$OUT/mtp_$tag"
  done
  ;;
L)
  say "one bucket beside one model step, latency bf16: gemv vs layer fence"
  timeout 150 python3 bench/gemma4/bucket_vs_step.py --out "$OUT/L31" --preset gemma4_31b --prompt-len 540 \
    --steps 8 --kv auto --selections latency --fences gemv:1024 layer:1024 > "$OUT/bvs_layer_31b.log" 2>&1
  cp "$OUT/L31/bucket_vs_step.md" "$OUT/bucket_vs_step_layer_31b.md"; rm -rf "$OUT/L31"
  grep "model step\|bucket, fence" "$OUT/bucket_vs_step_layer_31b.md"
  say "31B B1 buckets re-timed with the layer fence"
  FENCE_31B=layer:1024 DECODE=1x544 UNTIL=$((${UNTIL:-560} - (SECONDS - START))) bash bench/h200/fenced.sh P31
  ;;
esac
say "done"
