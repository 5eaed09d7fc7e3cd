#!/bin/bash
# Issue #17, H200 window of the twelfth session: flash-attention's own FA3 build (`FLASH_ATTN_v3+upstream`) as an
# objective candidate beside vLLM's. From the checkout root after the device-kernels activate step, parts in order
# on one machine (the conf files each part writes live in /tmp/kdev/conf, since a call's checkout is fresh):
#
#   bash bench/h200/fa3_builds.sh B     # ~2.5 min: build the hopper/ package from the carried source
#                                       #   (.devkernels/c4/fa3src.tar.xz, made here by bench/h200/pack_fa3src.sh:
#                                       #   flash-attention 0251105a's hopper/ and its cutlass 7127592 include/),
#                                       #   back as $OUT/fa3build.tar.xz
#   bash bench/h200/fa3_builds.sh R     # instead of B, seconds: unpack a build B brought back, carried as
#                                       #   .devkernels/c5/fa3build.tar.xz (same torch and CUDA; not yet run this way)
#   bash bench/h200/fa3_builds.sh C     # ~1 min: kselect conformance over the upstream build's claims, merged into
#                                       #   conf/conformance/nvidia_h200.yaml
#   bash bench/h200/fa3_builds.sh P     # ~3 min: kselect perf of the verified upstream claims at the points the
#                                       #   committed figures were timed at, with the same fences (31B layer:1024;
#                                       #   E4B gemv:192 decode, layer:192 prefill), merged into conf/perf
#   bash bench/h200/fa3_builds.sh P2    # what P left: the unfenced decode buckets the objective's default points
#                                       #   read (1x512 ... 64x8192) for both models, and E4B's prefill buckets the
#                                       #   budget skipped (--missing: only what the file lacks)
#   bash bench/h200/fa3_builds.sh E31   # e2e 31B on those files (ROUNDS interleaved prefill rounds), explain
#   bash bench/h200/fa3_builds.sh E4    # the same for E4B
#
# A device call brings back at most 8 files from $OUT: P's merged perf file did not come back beside E31's six (it
# stays in /tmp/kdev/conf/perf.yaml on the warm machine; copy it to $OUT in the next call).
set -u
PART=${1:?usage: fa3_builds.sh B|R|C|P|P2|E31|E4}
OUT=${OUT:-/tmp/fa3_builds_out}
LOG=$PART.log
source "$(dirname "$0")/window.sh"
SRC=/tmp/kdev/fa3/flash-attention
CONF=/tmp/kdev/conf
export PYTHONPATH=$SRC/hopper:$PYTHONPATH  # flash_attn_interface, flash_attn_3._C
mkdir -p "$CONF"
# the previous parts' conf files over this call's fresh checkout
for f in conformance perf; do [ -f "$CONF/$f.yaml" ] && cp "$CONF/$f.yaml" conf/$f/$GPU.yaml; done

case $PART in
B)
  mkdir -p /tmp/kdev/fa3 && tar xJf .devkernels/c4/fa3src.tar.xz -C /tmp/kdev/fa3
  touch "$SRC/README.md"  # hopper/setup.py reads ../README.md for its description; pack_fa3src.sh leaves it out
  say "build flash-attention hopper/ (forward, d256, bf16 + e4m3, paged, local)"
  timeout 400 bash bench/h200/build_fa3_hopper.sh "$SRC" > "$OUT/build.log" 2>&1; echo "build rc=$?"
  grep -v "^\s*$" "$OUT/build.log" | grep -iv "nvcc\|ptxas\|g++\|warning" | tail -5
  python3 -c "import flash_attn_interface, flash_attn_3._C; print('flash_attn_3 imports')"
  tar cf - -C "$SRC/hopper" flash_attn_3 flash_attn_interface.py flash_attn_config.py 2>/dev/null | xz -T0 -3 > "$OUT/fa3build.tar.xz"
  ls -la "$OUT/fa3build.tar.xz"
  ;;
R)
  mkdir -p "$SRC/hopper" && tar xJf .devkernels/c5/fa3build.tar.xz -C "$SRC/hopper"
  python3 -c "import flash_attn_interface, flash_attn_3._C; print('flash_attn_3 imports')"
  ;;
C)
  python3 -m kselect claims platform=sm90 platform.packages.fa3_upstream=true | grep "+upstream" > "$OUT/claims.txt"
  say "conformance: $(wc -l < "$OUT/claims.txt") upstream claims"
  timeout 300 python3 -m kselect.conformance --claims "$OUT/claims.txt" --gpu-name $GPU \
    --out conf/conformance/$GPU.yaml --jobs 4 > "$OUT/conformance.log" 2>&1; echo "rc=$?"
  tail -20 "$OUT/conformance.log"
  cp conf/conformance/$GPU.yaml "$CONF/conformance.yaml"; cp conf/conformance/$GPU.yaml "$OUT/conformance_$GPU.yaml"
  ;;
P|P2)
  perf() {  # $1 model, $2 fence ("" none), $3 decode buckets, $4 prefill buckets, $5 context spread, $6 extra flags
    say "perf FLASH_ATTN_v3+upstream $1 --fence ${2:-none}: decode ${3:-none}, prefill ${4:-none} $6"
    timeout $((${UNTIL:-560} - (SECONDS - START))) python3 -m kselect.perf --gpu-name $GPU --out conf/perf/$GPU.yaml \
      --models $1 --kernels FLASH_ATTN_v3+upstream --fence "$2" --rules vllm_0_33_0,post_pr52987 --max-page 128 \
      --decode "$3" --context-spread $5 --prefill "$4" --reps 5 --warm-jobs 8 $6 \
      --budget-s $((${UNTIL:-560} - 30 - (SECONDS - START))) 2>&1 | grep -v "^warm .*: ok$" >> "$OUT/perf.log"
    grep -c " ms graph" "$OUT/perf.log"; grep -v " ms graph" "$OUT/perf.log" | tail -4
    cp conf/perf/$GPU.yaml "$CONF/perf.yaml"
  }
  if [ $PART = P ]; then  # the e2e points, with the committed figures' fences
    perf gemma4_31b layer:1024 1x544,16x544 1x512,1x4096 0.0625
    perf gemma4_e4b gemv:192 1x544,16x544 "" 0.0625
    perf gemma4_e4b layer:192 "" 1x512,1x4096 0.0625
  else
    perf gemma4_31b,gemma4_e4b "" 1x512,16x512,1x1024,1x8192,16x1024,16x8192,64x1024,64x8192 "" 0 --missing
    perf gemma4_e4b layer:192 "" 1x512,1x4096 0 --missing
  fi
  cp conf/perf/$GPU.yaml "$OUT/perf_$GPU.yaml"
  ;;
E31|E4)
  case $PART in E4) m=e4b ;; *) m=31b ;; esac
  E2E=("${E2E_WINDOW[@]}" --no-hf ${E2E_EXTRA:-})
  e2e_and_explain $m ${UNTIL_E:-520}
  ;;
esac
say "done"
