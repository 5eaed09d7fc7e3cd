#!/bin/bash
# Issues #16/#17, second H200 window of 2026-12-01 (run from the checkout root after the device-kernels
# activate step; part A first, part B right after it on the same warm machine):
#
#   bash bench/h200/objective_at_run.sh A   # ~9 min: GPU tests of the FlashInfer re-plan change, the perf
#                                           #   buckets still missing, e2e 31B bf16 + FP8
#   bash bench/h200/objective_at_run.sh B   # ~6 min: e2e E4B bf16 + FP8, explain vs both runs, MTP round cost
#   bash bench/h200/objective_at_run.sh C   # ~4 min, after the relayout page guard (selector/measure/objective.py
#                                           #   _unmeasured_pages): e2e FP8 caches of both models again
#
# e2e.py: objective=vllm, objective=latency resolved at each run's own point (--objective-at-run: decode
# B1 x 544, decode B16 x 544, prefill 512, prefill 4,096) and every single-backend pin, fused compute,
# CUDA graphs in decode, 3 reps of 64 tokens after a 512-token prompt, one 4,096-token prompt, B1
# attention profiles of vllm and latency, and HF transformers (sdpa) in the same run as the baseline.
# FlashInfer's JIT workspace and FA4's compile cache from the first window can be carried in as
# .w2/kdev_caches.tar.xz (unpacked into /tmp/kdev before anything compiles).
set -u
PART=${1:?usage: objective_at_run.sh A|B|C}
OUT=${OUT:-/tmp/objective_at_run_out}
KEEP=${KEEP:-/tmp/kselect_objective_at_run}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
E2E=("${E2E_WINDOW[@]}" --hf-new 8)

if [ "$PART" = C ]; then
  for m in e4b 31b; do
    say "e2e $m FP8"
    timeout 200 python3 bench/gemma4/e2e.py --out "$OUT/e2e_${m}_fp8" --presets gemma4_$m --budget-s 190 \
      "${E2E[@]}" --kv fp8 --no-hf 2>&1 | grep -v Warning | tail -30
  done
  say "done"; exit 0
fi
if [ "$PART" = A ]; then
  say "GPU tests: FlashInfer re-planned graph decode (run ahead of the GPU), graph == eager in the engine"
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu_paths.py \
    -k "replanned or cuda_graph" tests/gemma4/test_engine.py -rs 2>&1 | tail -15
  say "perf: every verified claim's buckets still missing (composites at their own page/descale, fp16, reference)"
  cp conf/perf/$GPU.yaml "$KEEP/perf.yaml"
  timeout 150 python3 -m kselect.perf --gpu-name $GPU --out "$KEEP/perf.yaml" --models gemma4_31b,gemma4_e4b \
    --decode 1x512,16x512,1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --reps 3 \
    --budget-s 130 --missing 2>&1 | grep -v "^warm " | tail -25
  cp "$KEEP/perf.yaml" "$OUT/perf_$GPU.yaml"
  say "e2e 31B"
  timeout $((560 - (SECONDS - START))) python3 bench/gemma4/e2e.py --out "$OUT/e2e_31b" --presets gemma4_31b \
    --budget-s $((540 - (SECONDS - START))) "${E2E[@]}" 2>&1 | grep -v Warning | tail -70
else
  say "e2e E4B"
  timeout 330 python3 bench/gemma4/e2e.py --out "$OUT/e2e_e4b" --presets gemma4_e4b --budget-s 320 "${E2E[@]}" \
    2>&1 | grep -v Warning | tail -60
  say "explain vs the runs"
  cp -r "$KEEP/e2e_31b" "$OUT/" 2>/dev/null
  for m in 31b e4b; do
    [ -f "$OUT/e2e_$m/e2e.json" ] && timeout 60 python3 bench/h200/explain_vs_e2e.py --e2e "$OUT/e2e_$m/e2e.json" \
      --model gemma4_$m --out "$OUT/explain_$m.md" > /dev/null 2>&1 && tail -8 "$OUT/explain_$m.md"
  done
  say "MTP round cost, 31B B1, k=4, fused step, Triton everywhere (the drafts need explicit q positions)"
  left=$((560 - (SECONDS - START)))
  [ $left -gt 90 ] && timeout $left python3 bench/gemma4/bench_mtp.py platform=auto model=gemma4_31b \
    attention.backend=TRITON_ATTN --out "$OUT/mtp31b" --batch 1 --prompt-len 32 --new 64 --repeats 3 --no-fp8 \
    --inits copy 2>&1 | tail -20
fi
[ "$PART" = A ] && cp -r "$OUT/e2e_31b" "$KEEP/" 2>/dev/null
say "done"
