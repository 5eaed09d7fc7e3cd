#!/bin/bash
# Issue #17, H200 window of the fifteenth session. From the checkout root after the device-kernels activate step,
# parts in order on one machine:
#
#   bash bench/h200/clocks.sh S     # ~4 min: bench/gemma4/prefill_clocks.py, E4B's graphed 4,096-token prefill
#                                   #   (bf16, FP8; vLLM's choice and latency): host phases, device busy time, and
#                                   #   nvidia-smi clocks/power per round, back to back and after a 0.5 s pause
#   bash bench/h200/clocks.sh S2    # ~3 min: the same, back to back and with the garbage collector frozen, each
#                                   #   timed step's host ms in garbage collection and in the graph's fill
#   bash bench/h200/clocks.sh S3    # ~2 min: S2's back-to-back rounds alone (run on 25bd20d, whose graphs staged
#                                   #   their inputs through pinned buffers: no change, reverted)
#   bash bench/h200/clocks.sh G     # ~5 min: rounds.sh E4G's run (E4B bf16 + FP8, $ROUNDS rounds, prefill graphs
#                                   #   to 4,096)
#   bash bench/h200/clocks.sh T     # ~2 min: the prefill and decode graphs' GPU tests (not FlashInfer's JIT cases)
#   bash bench/h200/clocks.sh S4    # ~4 min, sixteenth session: back to back, on one intra-op CPU thread, without
#                                   #   nvidia-smi, and with a 0.5 ms GIL switch interval; each step's fill split into
#                                   #   block tables, slot mappings and replay planning, with its CPU time, context
#                                   #   switches and page faults, and the process's threads (where do 9-12 ms go?).
#                                   #   Run on fbf8d94, where torch's pool was the default and `--one-thread` the
#                                   #   contrast; since then an engine on a GPU serves on one thread
#                                   #   (gemma4/host_threads.py) and `--pool` is the contrast
#   bash bench/h200/clocks.sh F4    # vLLM's SM90 multimodal composite (TRITON_FLASH_ATTN_v3/_v4) timed with E4B's
#   bash bench/h200/clocks.sh F31   #   layer:192 fence (31B: layer:1024), prefill then decode buckets, as its
#                                   #   group-mates were (bench/h200/fenced.sh Q4 P4 / Q31 P31; $KEEP carries the
#                                   #   file from F4 to F31 on the warm machine)
set -u
PART=${1:?usage: clocks.sh S|S2|S3|S4|G|T|F4|F31}
OUT=${OUT:-/tmp/clocks_out}
here=$(dirname "$0")
case $PART in
S|S2|S3|S4)
  LOG=$PART.log
  source "$here/window.sh"
  case $PART in
  S) extra=(--pause-rounds ${PAUSE_ROUNDS:-20} --no-freeze) ;;
  S2) extra=(--pause-rounds 0 --freeze) ;;
  S4) extra=(--pause-rounds 0 --no-freeze --pool --unsampled --switch-ms 0.5) ;;
  *) extra=(--pause-rounds 0 --no-freeze) ;;
  esac
  say "prefill clocks: E4B, 4,096 tokens, graphs (${extra[*]})"
  timeout $((${UNTIL:-420} - (SECONDS - START))) python3 bench/gemma4/prefill_clocks.py --out "$OUT/$PART" \
    --preset gemma4_e4b --kv auto fp8 --len 4096 --rounds ${ROUNDS:-60} "${extra[@]}" 2>&1 \
    | grep -v "Warning\|USDT" | grep -v "^  profile" | cut -c1-400 | tail -30
  say "done"
  ;;
T)
  LOG=T.log
  source "$here/window.sh"
  say "GPU tests: prefill graphs (not FlashInfer), engine graphs"
  timeout ${UNTIL:-170} python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/gemma4/test_prefill_graph.py \
    tests/gemma4/test_engine.py -k "not flashinfer" > "$OUT/gpu_tests.log" 2>&1
  echo "rc=$?"; tail -5 "$OUT/gpu_tests.log"
  ;;
G)
  ROUNDS=${ROUNDS:-41} E2E_EXTRA="--prefill-graph-tokens 4096 --kv auto fp8 --batches 1 --selections vllm latency pin_fa pin_fa3 pin_triton" \
    exec bash "$here/fa3_builds.sh" E4 ;;
F4|F31)
  m=${PART#F}
  export KERNELS=TRITON_FLASH_ATTN_v3,TRITON_FLASH_ATTN_v4
  # each part its own folder: fenced.sh names its logs by model, not by part
  OUT=$OUT/Q$m UNTIL=${UNTIL_Q:-200} bash "$here/fenced.sh" Q$m
  OUT=$OUT/P$m UNTIL=${UNTIL_P:-300} bash "$here/fenced.sh" P$m
  ;;
*) echo "usage: clocks.sh S|S2|S3|S4|G|T|F4|F31" >&2; exit 2 ;;
esac
