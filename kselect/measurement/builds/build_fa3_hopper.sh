#!/usr/bin/env bash
# Build upstream FlashAttention-3 (flash-attention/hopper, package flash_attn_3) forward-only for what
# Gemma-4 needs from FA3 on SM90: head dim 256, bf16 and fp8 e4m3, paged KV, sliding window, varlen.
# Everything else is compiled out to keep the build near 6 instantiation files (minutes, not an hour).
#
#   bash kselect/measurement/builds/build_fa3_hopper.sh /path/to/flash-attention   # csrc/cutlass checked out
#   export PYTHONPATH=/path/to/flash-attention/hopper:$PYTHONPATH   # flash_attn_interface, flash_attn_3._C
#
# Needs nvcc >= 12.3 (13.0 on the H200), torch >= 2.9 (the stable-ABI flash_api_stable.cpp), ninja.
set -euo pipefail
src=$(cd "${1:?usage: build_fa3_hopper.sh FLASH_ATTENTION_SOURCE_DIR}" && pwd)
[ -f "$src/csrc/cutlass/include/cute/tensor.hpp" ] || { echo "no cutlass under $src/csrc/cutlass" >&2; exit 2; }
for flag in BACKWARD SPLIT SOFTCAP FP16 CLUSTER APPENDKV HDIM64 HDIM96 HDIM128 HDIM192 HDIMDIFF64 HDIMDIFF192 SM80; do
  export "FLASH_ATTENTION_DISABLE_$flag=TRUE"
done
# No network: never download toolchains or prebuilt wheels.
export FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_OFFLINE_BUILD=1
export MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-2}
cd "$src/hopper"
python3 setup.py build_ext --inplace
ls -la flash_attn_3/
