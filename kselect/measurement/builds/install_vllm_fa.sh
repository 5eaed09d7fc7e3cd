#!/usr/bin/env bash
# Install only vLLM's flash-attention build (`vllm/vllm_flash_attn`: the FA3 library and vLLM's FA4
# fork) from the wheel of one vLLM release into TARGET, without installing vLLM: `pip install vllm`
# would replace the torch of a GPU image. The FA3 library is built against torch's stable ABI, so it
# loads on torch 2.11 (verified on the H200 with 0.33.0's: bench/results/h200/).
#
#   kselect/measurement/builds/install_vllm_fa.sh [--release X.Y.Z] TARGET [VLLM_WHEEL]
#   export PYTHONPATH=TARGET:$PYTHONPATH        # then KSELECT_FA3_BUILD=vllm (or auto) finds it
#
# --release: the vLLM release whose FA build to install (default 0.34.0, the default rules'; kselect's
# rules=vllm_X_Y_Z names it as kernel_versions.vllm_flash_attn: vllm-X.Y.Z, and conformance/perf data
# measured with it should say the same). VLLM_WHEEL: a downloaded vllm-X.Y.Z-*.whl of that release
# (another release's wheel exits 2); without it the wheel is downloaded with pip (no dependencies)
# into a temporary directory. TARGET gets `vllm/__init__.py` (empty: only the flash-attention
# subpackage is there), `vllm/vllm_flash_attn/` without the FA2 library (`_vllm_fa2_C`, unused on
# SM90) and KERNEL_VERSIONS (`vllm_flash_attn: vllm-X.Y.Z`). An existing TARGET/vllm is replaced.
set -euo pipefail
version=0.34.0
if [ "${1:-}" = "--release" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 [--release X.Y.Z] TARGET [VLLM_WHEEL]" >&2; exit 2; }
  version=$2
  shift 2
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 [--release X.Y.Z] TARGET [VLLM_WHEEL]" >&2
  exit 2
fi
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "install_vllm_fa: --release $version: allowed: a vLLM release X.Y.Z (e.g. 0.34.0)" >&2
  exit 2
fi
target=$1
wheel=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$wheel" ]; then
  echo "downloading vllm==$version (the wheel only, no dependencies)..." >&2
  python3 -m pip download -q --no-deps --only-binary=:all: "vllm==$version" -d "$tmp/dl"
  wheel=$(ls "$tmp"/dl/vllm-"$version"-*.whl)
fi
[ -f "$wheel" ] || { echo "install_vllm_fa: no such wheel: $wheel" >&2; exit 2; }
case "$(basename "$wheel")" in
  vllm-"$version"-*.whl) ;;
  *) echo "install_vllm_fa: $wheel is not a vllm $version wheel (--release $version); allowed: vllm-$version-*.whl" >&2; exit 2 ;;
esac
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
(stage / "vllm" / "__init__.py").write_text("# only vllm.vllm_flash_attn is installed here (install_vllm_fa.sh)\n")
print(f"extracted {len(names)} files of {prefix}", file=sys.stderr)
PY
rm -rf "$target/vllm.tmp" && mv "$tmp/stage/vllm" "$target/vllm.tmp"
rm -rf "$target/vllm" && mv "$target/vllm.tmp" "$target/vllm"
printf 'vllm_flash_attn: vllm-%s\n' "$version" > "$target/KERNEL_VERSIONS.tmp" && mv "$target/KERNEL_VERSIONS.tmp" "$target/KERNEL_VERSIONS"
du -sh "$target/vllm" >&2
cat >&2 <<MSG
installed vllm/vllm_flash_attn into $target; use it with
  export PYTHONPATH=$target:\$PYTHONPATH
  python3 -c "from vllm.vllm_flash_attn import flash_attn_varlen_func; print('FA3 ok')"   # on the GPU machine
MSG
