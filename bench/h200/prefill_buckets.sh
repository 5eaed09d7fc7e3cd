#!/bin/bash
# Issues #16/#17, first H200 call of 2026-12-01 (after the device-kernels activate step; run from the
# checkout root). About 7 min:
#   1. bench/gemma4/prefill_profile.py: E4B eager prefill steps (512 / 4,096 tokens, bf16 cache) of
#      objective=vllm, objective=latency and the FA3 / Triton pins: host wall time vs device busy time,
#      host waits, top host ops and cProfile (alone on the machine: host timings must not share the CPU);
#   2. FlashInfer JIT warm-up (8 processes) beside the conformance run of the 19 claims never run here
#      (bench/h200/claims_sm90_new.txt: vision-mode composites, FA3 FP8 page 128), merged into a copy;
#   3. `kselect perf --missing` with decode buckets at 512 context (1x512, 16x512) added to the grid, for
#      every verified claim (the new composite claims included), merged into a copy of conf/perf;
#   4. FlashInfer's JIT workspace and FA4's compile cache, packed for the next call (carry them back).
# $OUT gets: prefill_profile/, conformance_nvidia_h200.yaml, perf_nvidia_h200.yaml, logs, versions.txt, caches.
set -u
OUT=${OUT:-/tmp/prefill_buckets_out}
LOG=run.log
source "$(dirname "$0")/window.sh"
MODELS=gemma4_31b,gemma4_e4b
cat "$OUT/versions.txt"

say "1. prefill profile (E4B, bf16 cache)"
timeout 200 python3 bench/gemma4/prefill_profile.py --out "$OUT/prefill_profile" --presets gemma4_e4b \
  --selections vllm latency pin_fa3 pin_triton --kv auto --lens 512 4096 --reps 5
say "2. FlashInfer warm-up + conformance of bench/h200/claims_sm90_new.txt"
cp conf/conformance/$GPU.yaml "$OUT/conformance_$GPU.yaml"
cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
timeout 220 python3 -m kselect.perf --gpu-name $GPU --models $MODELS --kernels FLASHINFER --kv bf16,fp8 \
  --decode 1x64 --prefill 1x64 --warm-jobs 8 --reps 1 --out /tmp/warm_perf.yaml > "$OUT/warm.log" 2>&1 &
WARM=$!
timeout 220 python3 -m kselect conformance --claims bench/h200/claims_sm90_new.txt --gpu-name $GPU \
  --out "$OUT/conformance_$GPU.yaml" --jobs 8 --missing 2>&1 | tail -30
wait $WARM; say "warm-up done"; tail -3 "$OUT/warm.log"
say "3. perf buckets missing (512-token decode buckets added)"
timeout 200 python3 -m kselect.perf --gpu-name $GPU --conformance "$OUT/conformance_$GPU.yaml" --out "$OUT/perf_$GPU.yaml" \
  --models $MODELS --kv bf16,fp8 --decode 1x512,16x512,1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 \
  --prefill 1x512,1x4096 --warm-jobs 8 --budget-s 170 --missing 2>&1 | tail -60
say "4. caches for the next call"
tar cf - -C /tmp/kdev fiws fa4cache 2>/dev/null | xz -T8 -3 > "$OUT/kdev_caches.tar.xz"
ls -la "$OUT"
say "done"
