#!/bin/bash
# Issues #16 and #17 on the H200, in two calls of at most 9 minutes (run from the checkout root, after
# `source /tmp/kdev/activate.sh` or the device-kernels activate step: FA3/FA4/FlashInfer must import):
#
#   bash bench/h200/perf_session.sh part1    # ~8.5 min: prep + 31B bf16, every selection
#   bash bench/h200/perf_session.sh part2    # ~8.5 min: prep (quick on a warm machine) + 31B FP8 vs bf16 + E4B
#   bash bench/h200/perf_session.sh smoke    # CPU: every step on gemma4_tiny / platform=sm90 (tests the script)
#
# prep (both parts; conf/ is re-copied every call, so part2 restores part1's files from $KEEP in /tmp):
#   1. FlashInfer modules of every target first, in 8 processes (JIT 30-150 s each; later uses hit the
#      disk cache), via `kselect.perf --warm-jobs` on a scratch perf file;
#   2. conformance of the claims objectives rely on that conf/conformance/nvidia_h200.yaml lacks
#      (bench/h200/claims_objective_sm90.txt, `--missing`: d512:page32 etc.), merged into conf/;
#   3. `kselect.perf --missing` over last session's grid (the 2 FlashInfer d512 4,096-token prefill
#      buckets that overflowed its workspace), merged into conf/perf/nvidia_h200.yaml.
# part1: e2e.py 31B bf16: objective=vllm, objective=latency and every single-backend pin (FA = FA4,
#   FA3, FlashInfer, Triton), fused compute, CUDA graphs; decode B1 (3 reps) and B16, prefill 512 and
#   4,096, the prefill chunk sweep (512/1024/2048) and B1 attention profiles of vllm and latency.
# part2: 31B FP8 (same selections) and bf16 vllm/latency in the same run (FP8 vs bf16, #16), E4B both
#   caches (every selection), then explain vs the run (bench/h200/explain_vs_e2e.py) for both models.
# $OUT gets: <part>.log, <part>.tar.gz (conformance/perf files, e2e json/md, explain), <part>_summary.md.
# Run part2 right after part1 on the same warm machine if possible (its prep then takes ~30 s instead of
# ~4 min: part1's conformance/perf files and FlashInfer's JIT cache are in /tmp). Each part stops starting
# new measurements at LIMIT (515 s) and packs what it has.
set -u
PART=${1:?usage: perf_session.sh part1|part2|smoke}
OUT=${OUT:-/tmp/perf_session_out}
KEEP=${KEEP:-/tmp/kselect_perf_session}
LIMIT=${LIMIT:-515}  # seconds for the whole call; e2e budgets take what is left
mkdir -p "$OUT" "$KEEP"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
WORK=$KEEP/$PART
rm -rf "$WORK" && mkdir -p "$WORK"
exec > >(tee -a "$OUT/$PART.log") 2>&1
START=$SECONDS
left() { echo $((LIMIT - (SECONDS - START))); }
say() { echo "=== [$((SECONDS - START)) s] $*"; }

CONF=conf/conformance/nvidia_h200.yaml
PERF=conf/perf/nvidia_h200.yaml
GPU=nvidia_h200
PLATFORM=auto
MODELS=gemma4_31b,gemma4_e4b
E2E=(--rules vllm_0_33_0 --no-hf --no-numerics --new 64 --reps 3 --prompt-len 512 --prefill-lens 4096
     --chunk-sweep 512 1024 2048 --profile-selections vllm latency --no-e4b-batch-64)
SEL_MODELS=${PART/part1/gemma4_31b}; SEL_MODELS=${SEL_MODELS/part2/gemma4_31b,gemma4_e4b}
SELS=(vllm latency pin_fa pin_fa3 pin_flashinfer pin_triton)
if [ "$PART" = smoke ]; then  # CPU: the same steps on tiny shapes (conf files written to scratch copies)
  GPU=cpu_smoke; PLATFORM=sm90; MODELS=gemma4_tiny; SEL_MODELS=gemma4_tiny
  mkdir -p "$WORK/conf"; CONF=$WORK/conf/cpu_smoke.yaml; PERF=$WORK/conf/perf_cpu_smoke.yaml
  E2E=(--smoke --platform cpu --rules vllm_0_33_0 --no-hf --no-numerics --prefill-lens 40 --chunk-sweep 16
       --chunk-selections vllm latency --profile-selections vllm latency)
fi

say "versions"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  for m in flashinfer flash_attn vllm; do python3 -c "import importlib.metadata as md, sys; print(sys.argv[1], md.version(sys.argv[1]))" \
    "$( [ $m = flashinfer ] && echo flashinfer-python || ([ $m = flash_attn ] && echo flash-attn-4) || echo vllm )" 2>/dev/null; done
  git log -1 --format='commit %H %s' 2>/dev/null; echo "KSELECT_COMMIT=${KSELECT_COMMIT:-}"; lscpu 2>/dev/null | grep 'Model name'
} > "$WORK/versions.txt" 2>&1
cat "$WORK/versions.txt"

# ---------------------------------------------------------------- prep
if [ "$PART" != smoke ] && [ -f "$KEEP/conformance.yaml" ]; then  # part1's results, same warm machine
  say "restoring conformance/perf files of the earlier call from $KEEP"
  cp "$KEEP/conformance.yaml" "$CONF"; cp "$KEEP/perf.yaml" "$PERF"
fi
if [ "$PART" != smoke ]; then  # in the background, beside the conformance run (both mostly wait on nvcc)
  say "FlashInfer JIT warm-up of every target the runs use, 8 processes (log: warm.log in the tarball)"
  timeout 200 python3 -m kselect.perf --gpu-name $GPU --models $MODELS --kernels FLASHINFER --kv bf16,fp8 \
    --decode 1x64 --prefill 1x64 --warm-jobs 8 --reps 1 --out "$WORK/warm_perf.yaml" > "$WORK/warm.log" 2>&1 &
  WARM=$!
fi
say "conformance: objective claims missing from $CONF"
if [ "$PART" = smoke ]; then
  python3 -m kselect conformance --claims TORCH_REFERENCE:bf16:d64:window,TORCH_REFERENCE:bf16:d128:causal,TORCH_REFERENCE:bf16:d128:page32 \
    --gpu-name $GPU --device cpu --platform cpu --out "$CONF"
  python3 -m kselect conformance --claims TORCH_REFERENCE:bf16:d64:window,TORCH_REFERENCE:bf16:d64:page16 \
    --gpu-name $GPU --device cpu --platform cpu --out "$CONF" --missing
else
  timeout 180 python3 -m kselect conformance --claims bench/h200/claims_objective_sm90.txt --gpu-name $GPU \
    --out "$CONF" --jobs 8 --missing
  wait $WARM; say "warm-up done"; tail -3 "$WORK/warm.log"
fi
say "perf: buckets missing from $PERF"
if [ "$PART" = smoke ]; then
  python3 -m kselect.perf --gpu-name $GPU --conformance "$CONF" --out "$PERF" --models $MODELS --device cpu \
    --decode 1x32 --prefill 1x16 --reps 1
  python3 -m kselect.perf --gpu-name $GPU --conformance "$CONF" --out "$PERF" --models $MODELS --device cpu \
    --decode 1x32,2x32 --prefill 1x16 --reps 1 --missing
else
  timeout 100 python3 -m kselect.perf --gpu-name $GPU --models $MODELS --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN \
    --kv bf16,fp8 --decode 1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 --warm-jobs 8 \
    --budget-s 80 --missing
  cp "$CONF" "$KEEP/conformance.yaml"; cp "$PERF" "$KEEP/perf.yaml"
fi
cp "$CONF" "$WORK/conformance_${GPU}.yaml"; cp "$PERF" "$WORK/perf_${GPU}.yaml" 2>/dev/null
say "selections the runs will use (objective=latency and vllm)"
for m in ${SEL_MODELS//,/ }; do for kv in auto fp8; do
  python3 -m kselect select platform=$PLATFORM model=$m kv_cache=$kv objective=latency 2>&1 | grep -E "^(sliding|full)|prefill on|why: (decode|prefill) \("
done; done

# ---------------------------------------------------------------- measurements
e2e() {  # e2e <name> <budget> args...
  local name=$1 budget=$2; shift 2
  say "e2e $name (budget $budget s)"
  python3 bench/gemma4/e2e.py --out "$WORK/e2e_$name" --budget-s "$budget" "$@"
}
case $PART in
  part1)
    e2e 31b_bf16 $(( $(left) - 20 )) --presets gemma4_31b --selections "${SELS[@]}" --kv auto --batches 1 16 "${E2E[@]}" \
      --chunk-selections vllm latency
    ;;
  part2)
    e2e 31b_fp8_vs_bf16 $(( ($(left) - 30) * 55 / 100 )) --presets gemma4_31b --selections "${SELS[@]}" --kv fp8 auto \
      --batches 1 16 "${E2E[@]}" --chunk-selections latency --skip pin_fa:auto pin_fa3:auto pin_triton:auto
    e2e e4b $(( $(left) - 45 )) --presets gemma4_e4b --selections "${SELS[@]}" --kv auto fp8 --batches 1 16 "${E2E[@]}" \
      --chunk-selections vllm latency
    for m in 31b_fp8_vs_bf16:gemma4_31b e4b:gemma4_e4b; do
      timeout 60 python3 bench/h200/explain_vs_e2e.py --e2e "$WORK/e2e_${m%%:*}/e2e.json" --model ${m##*:} \
        --platform $PLATFORM --out "$WORK/explain_${m##*_}.md" > /dev/null || echo "explain_vs_e2e ${m##*:} failed"
    done
    ;;
  smoke)
    e2e tiny 120 --selections "${SELS[@]}" --kv auto fp8 "${E2E[@]}" --chunk-selections vllm latency --skip pin_fa3:auto
    python3 bench/h200/explain_vs_e2e.py --e2e "$WORK/e2e_tiny/e2e.json" --model gemma4_tiny --platform sm90 \
      --out "$WORK/explain_tiny.md" > /dev/null && echo "explain_vs_e2e ok"
    ;;
  *) echo "unknown part $PART (part1, part2, smoke)"; exit 2 ;;
esac

# ---------------------------------------------------------------- results back: few files
say "packing"
cat "$WORK"/e2e_*/e2e.md "$WORK"/explain_*.md > "$OUT/${PART}_summary.md" 2>/dev/null
tar -C "$KEEP" -czf "$OUT/$PART.tar.gz" "$PART"
ls -la "$OUT"
say "done"
