#!/usr/bin/env bash
# Set up vLLM's own selection code on a CPU machine, for the export round trip (kselect.measurement.vllm.export_roundtrip;
# `kselect oracle` builds its own venv).
#
#   bash kselect/measurement/vllm/setup.sh [VERSION]        # default 0.33.0, from the checkout root
#
# vLLM pins differ from the project's test env (transformers>=5.16.1,<5.21, triton~=3.8), so it
# gets a venv of its own under $KSELECT_VLLM_HOME (default ~/.cache/kselect/vllm):
#   wheels/vllm-VERSION-*.whl   the registry's wheel, downloaded once
#   src-VERSION/                its Python sources only (no *.so, headers, CUDA sources, vllm-rs)
#   venv-VERSION/               torch 2.13.0 CPU + the pins + the import-only deps (or the one `kselect oracle` built)
#   roundtrip-VERSION-<checkout>/ that venv's packages + Hydra + this checkout (no deps): export_roundtrip.py's python
# Prints the two paths the round trip needs (--src, its python). Idempotent: re-runs skip what exists.
set -euo pipefail
VERSION="${1:-0.33.0}"
HOME_DIR="${KSELECT_VLLM_HOME:-$HOME/.cache/kselect/vllm}"
CHECKOUT="${KSELECT_CHECKOUT:-$(cd "$(dirname "$0")/../../.." && pwd)}"  # the checkout holding this script
WHEELS="$HOME_DIR/wheels"; SRC="$HOME_DIR/src-$VERSION"; VENV="$HOME_DIR/venv-$VERSION"
mkdir -p "$WHEELS"

# 1. the wheel (reuse a copy already on disk, e.g. $KSELECT_VLLM_WHEEL_DIR)
WHEEL="$(ls "$WHEELS"/vllm-"$VERSION"-*.whl 2>/dev/null | head -1 || true)"
if [ -z "$WHEEL" ]; then
  for d in ${KSELECT_VLLM_WHEEL_DIR:-/tmp/kselect-wheels}; do
    f="$(ls "$d"/vllm-"$VERSION"-*.whl 2>/dev/null | head -1 || true)"
    if [ -n "$f" ]; then cp "$f" "$WHEELS/.tmp.$$" && mv "$WHEELS/.tmp.$$" "$WHEELS/$(basename "$f")"; fi
  done
  WHEEL="$(ls "$WHEELS"/vllm-"$VERSION"-*.whl 2>/dev/null | head -1 || true)"
fi
if [ -z "$WHEEL" ]; then
  pip download --no-deps "vllm==$VERSION" -d "$WHEELS"
  WHEEL="$(ls "$WHEELS"/vllm-"$VERSION"-*.whl | head -1)"
fi

# 2. the Python sources (vllm/third_party kept: its pynvml.py is imported)
if [ ! -f "$SRC/.done" ]; then
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  python3 - "$WHEEL" "$SRC.tmp" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
SKIP = (".so", ".h", ".hpp", ".cuh", ".inl", ".cu", ".cpp")
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if not n.endswith(SKIP) and n != "vllm/vllm-rs" and ".so." not in n]
    z.extractall(dest, names)
print(f"extracted {len(names)} files")
PY
  rm -rf "$SRC" && mv "$SRC.tmp" "$SRC" && touch "$SRC/.done"
fi

# 3. the venv: the pins, the import-only deps, kselect itself without its deps
if [ ! -f "$VENV/.done" ]; then
  python3 -m venv "$VENV"
  # the machine's constraint file caps torch for the project env; this venv pins its own
  PIP_CONSTRAINT="" "$VENV/bin/pip" install -q torch==2.13.0 'transformers>=5.16.1,<5.21' 'triton~=3.8.0' \
    regex cachetools psutil numpy requests tqdm py-cpuinfo msgspec cloudpickle einops pyzmq blake3 \
    sentencepiece protobuf cbor2 aiohttp openai openai-harmony pillow pybase64 uvloop prometheus_client \
    xgrammar fastapi partial-json-parser llguidance uvicorn prometheus-fastapi-instrumentator \
    hydra-core omegaconf 'pydantic>=2' pyyaml
  "$VENV/bin/pip" install -q --no-deps -e "$CHECKOUT"
  touch "$VENV/.done"
fi
# 4. the venv `kselect oracle` builds (same path) has no kselect: a thin venv over it for this checkout
#    (the release venv's packages through a .pth, Hydra, and this checkout without deps)
RT="$HOME_DIR/roundtrip-$VERSION-$(printf %s "$CHECKOUT" | cksum | cut -d' ' -f1)"
if [ ! -f "$RT/.done" ]; then
  "$VENV/bin/python" -m venv "$RT"
  SITE="$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  echo "$SITE" > "$("$RT/bin/python" -c 'import site; print(site.getsitepackages()[0])')/release_venv.pth"
  PIP_CONSTRAINT="" "$RT/bin/pip" install -q 'hydra-core>=1.3.2,<1.4' 'omegaconf>=2.3,<2.5'
  "$RT/bin/pip" install -q --no-deps -e "$CHECKOUT"
  touch "$RT/.done"
fi
echo "src=$SRC"
echo "python=$RT/bin/python"
