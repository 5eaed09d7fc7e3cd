# Sourced by the H200 window scripts (objective_at_run.sh, request_layout.sh, perf_pages.sh,
# prefill_buckets.sh) after they set OUT, LOG and (optionally) KEEP: the checkout on PYTHONPATH, everything
# teed into $OUT/$LOG, `say` with the seconds since the start, $OUT/versions.txt (GPU, driver,
# torch/CUDA/triton/transformers, FlashInfer and flash-attn-4, KSELECT_COMMIT, host CPU), and the e2e.py
# options the #17 windows share (E2E_WINDOW: objective=vllm, objective=latency at each run's own point and
# request, every single-backend pin; B1/B16 decode after a 512-token prompt with 64 new tokens, prefill
# 4,096, both prefills again in $ROUNDS (default 5) interleaved rounds over the selections, judged round by round;
# B1 attention profiles of vllm and latency, decode steps and the 512-token prefill).
mkdir -p "$OUT" ${KEEP:+"$KEEP"}
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
SELS=(vllm latency pin_fa pin_fa3 pin_flashinfer pin_triton)
E2E_WINDOW=(--rules vllm_0_33_0 --no-numerics --new 64 --reps 3 --prompt-len 512 --prefill-lens 4096 --prefill-rounds ${ROUNDS:-5}
            --batches 1 16 --no-e4b-batch-64 --kv auto fp8 --profile-selections vllm latency --selections "${SELS[@]}")
# e2e of one model (31b or e4b) with the window's options, then explain vs that run; $2: the seconds since
# START by which e2e must end (its own budget 20 s less)
e2e_and_explain() {
  local m=$1 until=$2
  say "e2e $m"
  timeout $((until - (SECONDS - START))) python3 bench/gemma4/e2e.py --out "$OUT/e2e_$m" --presets gemma4_$m \
    --budget-s $((until - 20 - (SECONDS - START))) "${E2E[@]}" 2>&1 | grep -v Warning | tail -70
  say "explain vs the run"
  timeout 60 python3 bench/h200/explain_vs_e2e.py --e2e "$OUT/e2e_$m/e2e.json" --model gemma4_$m \
    --out "$OUT/explain_$m.md" > /dev/null 2>&1 && sed -n '/^## Attention/,$p' "$OUT/explain_$m.md"
}
