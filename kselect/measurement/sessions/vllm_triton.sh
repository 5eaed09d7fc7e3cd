#!/bin/bash
# Issue #43: vLLM's own Triton kernel (TRITON_ATTN = unified_attention from the vLLM release's source,
# kernels/vllm_triton.py) on the H200: conformance, perf buckets, and the e2e objective table over vLLM's kernels
# only beside the same-run pins. kselect's own kernel is TRITON_ATTN+kselect; its figures are committed already.
#
# Before (on the CPU side; the H200 has no network): put the release's kernel files in the checkout and carry them,
#   KSELECT_CACHE=$PWD/.kcache python -m kselect.kernels.vllm_triton_fetch --release 0.33.0 [--wheel vllm-0.33.0-*.whl]
# then on the H200, from the checkout root after the device-kernels activate step, parts in order on one warm
# machine ($KEEP carries C's conformance file and the perf file between parts; commit $OUT's copies after):
#
#   S=kselect/measurement/sessions/vllm_triton.sh
#   bash $S C    # ~4 min: the interpreter tests again on CUDA (bf16 included), then
#                #   `kselect conformance` of every TRITON_ATTN claim TRITON_ATTN+kselect has,
#                #   merged into conf/conformance/nvidia_h200.yaml ($OUT/conformance_*.yaml)
#   bash $S P    # ~6 min: `kselect perf --kernels TRITON_ATTN` over the buckets the
#                #   +kselect build has, back to back (perf_objective.sh's grid)
#   bash $S E4   # ~9 min each: e2e with vllm, vllm_twin (the run's noise band), latency,
#   bash $S E31  #   latency_vllm (vLLM's kernels only) and every single-backend pin
#                #   (pin_triton is now vLLM's kernel), bf16 and FP8, on the perf file of P/F
#
# CPU=1 runs each part's CPU form (interpreter, tiny shapes, e2e --smoke): a check that the commands work, no figures.
set -u
PART=${1:?usage: vllm_triton.sh C|P|E4|E31}
OUT=${OUT:-/tmp/vllm_triton_out}
KEEP=${KEEP:-/tmp/kselect_vllm_triton}
LOG=$PART.log
RELEASE=${KSELECT_VLLM_RELEASE:-0.33.0}
[ -d "$PWD/.kcache/vllm-triton/$RELEASE" ] && export KSELECT_CACHE=${KSELECT_CACHE:-$PWD/.kcache}
export KSELECT_VLLM_RELEASE=$RELEASE
here=$(dirname "$0")
if [ "${CPU:-0}" = 1 ]; then
  mkdir -p "$OUT" "$KEEP"; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TRITON_INTERPRET=1
  START=$SECONDS; say() { echo "=== [$((SECONDS - START)) s] $*"; }; GPU=cpu_check
  DEV=(--device cpu)
else
  # what the retired window scripts' window.sh did (bench/results/LOG.md): output, clock, versions, e2e + explain
  mkdir -p "$OUT"; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  exec > >(tee -a "$OUT/$LOG") 2>&1
  START=$SECONDS; say() { echo "=== [$((SECONDS - START)) s] $*"; }; GPU=nvidia_h200
  { nvidia-smi --query-gpu=name,driver_version --format=csv 2>/dev/null
    python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"
    python3 -c "import importlib.metadata as md; [print(p, md.version(p)) for p in ('flashinfer-python', 'flash-attn-4')]" 2>/dev/null
    echo "KSELECT_COMMIT=${KSELECT_COMMIT:-}"; echo "vLLM Triton kernel release $RELEASE"
  } > "$OUT/versions.txt" 2>&1
  e2e_and_explain() {  # $1: 31b or e4b; $2: the seconds since START by which e2e must end
    local m=$1 until=$2
    say "e2e $m"
    timeout $((until - (SECONDS - START))) python3 -m kselect.measurement.e2e --out "$OUT/e2e_$m" --presets gemma4_$m \
      --budget-s $((until - 20 - (SECONDS - START))) "${E2E[@]}" 2>&1 | grep -v Warning | tail -70
    say "explain vs the run"
    timeout 60 python3 -m kselect.measurement.explain_vs_e2e --e2e "$OUT/e2e_$m/e2e.json" --model gemma4_$m \
      --out "$OUT/explain_$m.md" > /dev/null 2>&1 && sed -n '/^## Attention/,$p' "$OUT/explain_$m.md"
  }
  DEV=()
  # each run() call copies the checkout afresh: C's verdicts and P/F's figures live in $KEEP on the warm machine
  mkdir -p "$KEEP"
  [ "$PART" != C ] && [ -f "$KEEP/conformance.yaml" ] && cp "$KEEP/conformance.yaml" conf/conformance/$GPU.yaml
fi
python3 -c "from kselect.kernels import vllm_triton as v; print('vLLM Triton kernel:', v.load().label, v.source_dir())" \
  || { echo "vllm_triton.sh: vLLM $RELEASE's kernel source is not here; see the comment at the top" >&2; exit 2; }

# the TRITON_ATTN claims to check: every claim the +kselect build was checked for, on vLLM's kernel
claims() {
  python3 - "$1" <<'PY'
import sys
import yaml
from kselect.selector.evidence.conformance_data import CONFORMANCE_DIR
cpu = sys.argv[1] == "1"
if cpu:  # the interpreter: float32/float16 (it multiplies bf16 dot operands as integers), one small head size
    ids = [f"TRITON_ATTN:fp32:d64:{f}" for f in ("causal", "window", "sinks", "page16")] + \
          ["TRITON_ATTN:fp32:d128:causal", "TRITON_ATTN:fp32:d128:page16", "TRITON_ATTN:fp16:d64:window"]  # gemma4_tiny
else:
    have = yaml.safe_load(open(CONFORMANCE_DIR / "nvidia_h200.yaml"))["claims"]
    ids = sorted(c.replace("TRITON_ATTN+kselect:", "TRITON_ATTN:", 1) for c in have if c.startswith("TRITON_ATTN+kselect:"))
print("\n".join(ids))
PY
}

case $PART in
C)
  mkdir -p "$KEEP"
  if [ "${CPU:-0}" != 1 ]; then
    say "the interpreter tests on CUDA (vLLM's kernel against the reference, bf16 and FP8 included)"
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_vllm_triton.py -rs 2>&1 | tail -6
  fi
  claims "${CPU:-0}" > "$OUT/claims_vllm_triton.txt"
  say "conformance: $(wc -l < "$OUT/claims_vllm_triton.txt") TRITON_ATTN claims on vLLM $RELEASE's kernel"
  target=conf/conformance/$GPU.yaml; [ "${CPU:-0}" = 1 ] && target=$KEEP/conformance_cpu.yaml
  timeout 400 python3 -m kselect.measurement.conformance --claims "$OUT/claims_vllm_triton.txt" --gpu-name $GPU "${DEV[@]}" \
    --out "$target" --jobs ${JOBS:-4} 2>&1 | tail -30
  cp "$target" "$OUT/conformance_$GPU.yaml"; [ "${CPU:-0}" = 1 ] || cp "$target" "$KEEP/conformance.yaml"
  grep -A3 "^  TRITON_ATTN:" "$target" | grep -c "status: verified"
  ;;
P)
  [ -f "$KEEP/perf.yaml" ] || cp conf/perf/nvidia_h200.yaml "$KEEP/perf.yaml"
  if [ "${CPU:-0}" = 1 ]; then
    say "perf (CPU form): two decode buckets, one prefill, on the claims C verified"
    timeout 300 python3 -m kselect.measurement.perf --gpu-name $GPU --conformance "$KEEP/conformance_cpu.yaml" --out "$KEEP/perf_cpu.yaml" \
      --models gemma4_tiny --kernels TRITON_ATTN --decode 1x64 --prefill 1x32 --device cpu --reps 1 --max-page 16 2>&1 | tail -8
    cp "$KEEP/perf_cpu.yaml" "$OUT/" 2>/dev/null
  else
    say "perf: TRITON_ATTN (vLLM's kernel), the +kselect build's back-to-back grid"
    timeout 560 python3 -m kselect.measurement.perf --gpu-name $GPU --out "$KEEP/perf.yaml" --models gemma4_31b,gemma4_e4b \
      --kernels TRITON_ATTN --kv bf16,fp8 --rules vllm_0_33_0,post_pr52987 --max-page 128 \
      --decode 1x512,1x544,1x1024,1x8192,16x512,16x544,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096 \
      --warm-jobs 12 --budget-s 500 2>&1 | grep -v "^warm .*: ok$" | tail -30
    cp "$KEEP/perf.yaml" "$OUT/perf_$GPU.yaml"
  fi
  ;;
E4|E31)
  m=${PART#E}; m=${m/4/e4b}; m=${m/31/31b}
  SELS=(vllm vllm_twin latency latency_vllm pin_fa pin_fa3 pin_flashinfer pin_triton)
  if [ "${CPU:-0}" = 1 ]; then
    say "e2e --smoke (CPU form) with the same selections"
    timeout 500 python3 -m kselect.measurement.e2e --out "$OUT/e2e_smoke" --smoke --selections vllm vllm_twin latency latency_vllm \
      --no-hf 2>&1 | tail -20
  else
    [ -f "$KEEP/perf.yaml" ] && cp "$KEEP/perf.yaml" conf/perf/$GPU.yaml  # select on the figures P/F measured
    E2E=(--rules vllm_0_33_0 --no-numerics --new 64 --reps 3 --prompt-len 512 --prefill-lens 4096 --prefill-rounds ${ROUNDS:-15}
         --batches 1 16 --no-e4b-batch-64 --kv auto fp8 --profile-selections vllm latency_vllm --selections "${SELS[@]}")
    e2e_and_explain $m 560
    sed -n '/^## Objectives vs/,/^$/p;/^| preset | kv | metric | vllm | objective/,/^$/p' "$OUT/e2e_$m/e2e.md"
  fi
  ;;
*) echo "usage: vllm_triton.sh C|P|E4|E31" >&2; exit 2 ;;
esac
say "done"
