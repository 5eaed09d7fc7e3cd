#!/bin/bash
# H200: measure conf/perf/nvidia_h200.yaml with `kselect perf` (31B and E4B shapes, every verified
# claim of FA3/FA4/FlashInfer/Triton, bf16 and fp8), copy it and the log to $OUT.
# Run from the checkout root after `source .devkernels/c2/activate.sh` (or /tmp/kdev/activate.sh).
set -u
OUT=${OUT:-/tmp/perf_out}
BUDGET=${BUDGET:-230}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" > "$OUT/versions.txt" 2>&1
git log -1 --format='%H %s' >> "$OUT/versions.txt" 2>/dev/null
timeout $((BUDGET + 60)) python3 -m kselect.perf --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b \
  --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN --kv bf16,fp8 \
  --decode 1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 \
  --warm-jobs 8 --budget-s "$BUDGET" 2>&1 | tee "$OUT/perf.log"
cp conf/perf/nvidia_h200.yaml "$OUT/" 2>/dev/null || echo "no perf file written" | tee -a "$OUT/perf.log"
