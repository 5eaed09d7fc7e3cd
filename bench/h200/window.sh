# Sourced by the H200 window scripts (objective_at_run.sh, request_layout.sh, prefill_buckets.sh) after
# they set OUT and LOG: the checkout on PYTHONPATH, everything teed into $OUT/$LOG, `say` with the
# seconds since the start, and $OUT/versions.txt (GPU, driver, torch/CUDA/triton/transformers,
# FlashInfer and flash-attn-4, KSELECT_COMMIT, host CPU).
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
exec > >(tee -a "$OUT/$LOG") 2>&1
START=$SECONDS
say() { echo "=== [$((SECONDS - START)) s] $*"; }
GPU=nvidia_h200
{ nvidia-smi --query-gpu=name,driver_version --format=csv 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  python3 -c "import importlib.metadata as md; [print(p, md.version(p)) for p in ('flashinfer-python', 'flash-attn-4')]" 2>/dev/null
  echo "KSELECT_COMMIT=${KSELECT_COMMIT:-}"; lscpu 2>/dev/null | grep 'Model name'; nproc
} > "$OUT/versions.txt" 2>&1
