#!/usr/bin/env bash
# Install only vLLM's flash-attention build (`vllm/vllm_flash_attn`: the FA3 library and vLLM's FA4
# fork) from the vLLM 0.33.0 wheel into TARGET, without installing vLLM: `pip install vllm` would
# replace the torch of a GPU image. The FA3 library is built against torch's stable ABI, so it loads
# on torch 2.11 (verified on the H200: bench/results/h200/).
#
#   bench/h200/install_vllm_fa.sh TARGET [VLLM_WHEEL]
#   export PYTHONPATH=TARGET:$PYTHONPATH        # then KSELECT_FA3_BUILD=vllm (or auto) finds it
#
# VLLM_WHEEL: a downloaded vllm-0.33.0-*.whl; without it the wheel is downloaded with pip (about
# 400 MB, no dependencies) into a temporary directory. TARGET gets `vllm/__init__.py` (empty: only
# the flash-attention subpackage is there) and `vllm/vllm_flash_attn/` without the FA2 library
# (`_vllm_fa2_C`, unused on SM90). An existing TARGET/vllm is replaced.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 TARGET [VLLM_WHEEL]" >&2
  exit 2
fi
target=$1
wheel=${2:-}
version=0.33.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$wheel" ]; then
  echo "downloading vllm==$version (the wheel only, no dependencies)..." >&2
  python3 -m pip download -q --no-deps --only-binary=:all: "vllm==$version" -d "$tmp/dl"
  wheel=$(ls "$tmp"/dl/vllm-"$version"-*.whl)
fi
[ -f "$wheel" ] || { echo "install_vllm_fa: no such wheel: $wheel" >&2; exit 2; }
mkdir -p "$target"
python3 - "$wheel" "$tmp/stage" <<'PY'
import sys, zipfile
from pathlib import Path

wheel, stage = sys.argv[1], Path(sys.argv[2])
prefix = "vllm/vllm_flash_attn/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and "_vllm_fa2_C" not in n]
    if not any(n.endswith(".so") for n in names):
        sys.exit(f"install_vllm_fa: {wheel} has no compiled {prefix} library")
    for n in names:
        z.extract(n, stage)  # ZipFile.extract keeps paths inside stage
(stage / "vllm" / "__init__.py").write_text("# only vllm.vllm_flash_attn is installed here (bench/h200/install_vllm_fa.sh)\n")
print(f"extracted {len(names)} files of {prefix}", file=sys.stderr)
PY
rm -rf "$target/vllm.tmp" && mv "$tmp/stage/vllm" "$target/vllm.tmp"
rm -rf "$target/vllm" && mv "$target/vllm.tmp" "$target/vllm"
du -sh "$target/vllm" >&2
cat >&2 <<MSG
installed vllm/vllm_flash_attn into $target; use it with
  export PYTHONPATH=$target:\$PYTHONPATH
  python3 -c "from vllm.vllm_flash_attn import flash_attn_varlen_func; print('FA3 ok')"   # on the GPU machine
MSG
