#!/bin/bash
# Issue #17, the H200 window after bench/results/h200/rounds31/: the prefill cells still equal to vLLM's choice,
# with more rounds, and E4B's 4,096-token prefill on CUDA graphs (host-bound eager there). From the checkout root
# after the device-kernels activate step and `bash bench/h200/fa3_builds.sh R` (carrying .devkernels/c5, the
# upstream FA3 build `fa3_builds.sh B` returned), parts in order on one machine:
#
#   bash bench/h200/rounds.sh E4G    # ~4 min: E4B bf16 + FP8, B1, $ROUNDS (41) rounds, prefill graphs up to 4,096
#   bash bench/h200/rounds.sh E31B   # ~5 min: 31B bf16, B1, $ROUNDS (61) rounds over vLLM's choice, latency, pin_fa3
#                                    #   (explain's headroom at 4,096: 0.57% of the step)
#   bash bench/h200/fenced.sh P4     # E4B decode buckets re-timed with the layer:192 fence (FlashInfer JIT included)
#   bash bench/h200/rounds.sh E31P   # ~5 min: 31B bf16's 512-token prefill alone, $ROUNDS (1001) rounds of vLLM's choice
#                                    #   and latency (same FA4 kernels at other blocks: 0.19% of the step in the
#                                    #   profile of bench/results/h200/host_threads/E31B; 61 rounds resolve +-0.5%)
#                                    #   ran: bench/results/h200/rounds1001/E31P, 1.002 [1.001, 1.003], faster
set -u
here=$(dirname "$0")
case ${1:?usage: rounds.sh E4G|E31B|E31P} in
E4G)  ROUNDS=${ROUNDS:-41} E2E_EXTRA="--prefill-graph-tokens 4096 --kv auto fp8 --batches 1 --selections vllm latency pin_fa pin_fa3 pin_triton" \
        exec bash "$here/fa3_builds.sh" E4 ;;
E31B) ROUNDS=${ROUNDS:-61} E2E_EXTRA="--kv auto --batches 1 --selections vllm latency pin_fa3" \
        exec bash "$here/fa3_builds.sh" E31 ;;
E31P) ROUNDS=${ROUNDS:-1001} E2E_EXTRA="--kv auto --batches 1 --selections vllm latency --prefill-lens" \
        exec bash "$here/fa3_builds.sh" E31 ;;
*) echo "usage: rounds.sh E4G|E31B|E31P" >&2; exit 2 ;;
esac
