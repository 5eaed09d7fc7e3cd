#!/usr/bin/env bash
# Pack the FA3 source build_fa3_hopper.sh (beside this script) builds on the H200 (no network there) into
# .devkernels/c4/fa3src.tar.xz
# (~1.2 MB): flash-attention's hopper/ at FA_COMMIT and its cutlass submodule's include/ at CUTLASS_COMMIT, from
# local git clones (bare or not) of github.com/Dao-AILab/flash-attention and github.com/NVIDIA/cutlass.
#
#   bash kselect/measurement/builds/pack_fa3src.sh /path/to/flash-attention.git /path/to/cutlass.git
set -euo pipefail
fa=${1:?usage: pack_fa3src.sh FLASH_ATTENTION_GIT_DIR CUTLASS_GIT_DIR} cutlass=${2:?cutlass git dir}
FA_COMMIT=${FA_COMMIT:-0251105a}           # the build behind conf/conformance's +upstream claims
CUTLASS_COMMIT=${CUTLASS_COMMIT:-7127592}  # flash-attention 0251105a's csrc/cutlass submodule
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/flash-attention/csrc/cutlass"
git -C "$fa" archive "$FA_COMMIT" hopper | tar xf - -C "$tmp/flash-attention"
git -C "$cutlass" archive "$CUTLASS_COMMIT" include | tar xf - -C "$tmp/flash-attention/csrc/cutlass"
[ -f "$tmp/flash-attention/csrc/cutlass/include/cute/tensor.hpp" ] || { echo "no cute/ in cutlass $CUTLASS_COMMIT" >&2; exit 2; }
mkdir -p .devkernels/c4
tar cf - -C "$tmp" flash-attention | xz -T0 -6 > .devkernels/c4/fa3src.tar.xz.part
mv .devkernels/c4/fa3src.tar.xz.part .devkernels/c4/fa3src.tar.xz
ls -la .devkernels/c4/fa3src.tar.xz
