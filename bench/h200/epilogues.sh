#!/bin/bash
# Issue #16, H200 window of the eleventh session (T, F, E and J ran at fa0ad1d: bench/results/h200/epilogues/):
# outside the layers, 3 Triton kernels where PyTorch took 13 (embedding gathers with their scales, the per-layer
# inputs' scale/norm/add/mix, both rope tables, the logit softcap in the LM head GEMV's epilogue), and 2 kernels
# between decode-graph replays where 7 ran (the graph advances its positions and lengths; EOS bookkeeping only where
# read), and a captured step's slots in one kernel a group where PyTorch took ~9. From the checkout root after the
# device-kernels activate step:
#
#   bash bench/h200/epilogues.sh T   # ~4 min: every kernel test on the GPU (pdl.sh T), among them the epilogues
#                                    #   bit for bit against PyTorch's CUDA ops at E4B's LM-head and projection sizes,
#                                    #   then tests/gemma4's GPU tests (captured decode, prefill and speculative steps)
#   bash bench/h200/epilogues.sh F   # ~4 min: fusion.py E4B and 31B, batch 1 and 16, greedy tokens fused vs unfused
#                                    #   over 128 steps at batch 1 (bf16 and FP8 caches): the epilogues keep them
#   bash bench/h200/epilogues.sh E   # ~3 min: fenced.sh E2 (e2e E4B, every selection): objective=latency at batch 1
#                                    #   against 300 tok/s
#   bash bench/h200/epilogues.sh J   # ~1 min, last: the FlashInfer JIT modules and FA4 compile cache this machine
#                                    #   built, back as $OUT/jit.partNN (15 MiB each). A later session that keeps them
#                                    #   in an ignored .devkernels/c3/ restores them with one more call, carrying it:
#                                    #   `mkdir -p /tmp/kdev && cat .devkernels/c3/jit.part* | tar xJf - -C /tmp/kdev`
#                                    #   (FlashInfer's JIT took 80-170 s of each earlier window).
set -u
PART=${1:?usage: epilogues.sh T|F|E|J}
OUT=${OUT:-/tmp/epilogues_out}
case $PART in
T)
  OUT=$OUT bash "$(dirname "$0")/pdl.sh" T
  LOG=T_gemma4.log
  source "$(dirname "$0")/window.sh"
  say "GPU: tests/gemma4 (real CUDA graphs: decode graphs that advance themselves, slots from the kernel)"
  timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/gemma4 > "$OUT/gpu_tests_gemma4.log" 2>&1
  tail -3 "$OUT/gpu_tests_gemma4.log"
  ;;
E) OUT=$OUT bash "$(dirname "$0")/fenced.sh" E2 ;;
J)
  mkdir -p "$OUT"
  tar cf - -C /tmp/kdev fiws fa4cache 2>/dev/null | xz -T0 -3 | split -b 15M -d - "$OUT/jit.part"
  ls -l "$OUT"
  ;;
F)
  LOG=$PART.log
  source "$(dirname "$0")/window.sh"
  say "fusion: E4B and 31B, triton, B1 and B16, greedy fused vs unfused at B1 (bf16 and FP8 caches)"
  timeout $((${UNTIL:-560} - (SECONDS - START))) python3 bench/gemma4/fusion.py --out "$OUT/F" \
    --presets gemma4_e4b gemma4_31b --modes triton --selection pin_triton --compile-presets --fp8-presets \
    --batches 1 16 --no-hf --long 128 --greedy-batch 1 --greedy-kv auto fp8 \
    --budget-s $((${UNTIL:-560} - 15 - (SECONDS - START))) 2>&1 | grep -v Warning | grep "^\[" | tail -20
  say "done"
  ;;
esac
