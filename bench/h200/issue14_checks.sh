#!/usr/bin/env bash
# H200, issue #14, one call (about 6 minutes; FlashInfer's first-use JIT adds up to 2-4 min when its
# cache is cold). Run from the checkout root with the device kernels active (FA4, FlashInfer, hydra:
# `source .devkernels/c2/activate.sh` or `/tmp/kdev/activate.sh`), carrying .gpu14/:
#
#   bash bench/h200/issue14_checks.sh            # OUT=... (default /tmp/issue14_out)
#
# (c) first: vLLM's FA3 from bench/h200/install_vllm_fa.sh's output (.gpu14/vllm_fa_install.tar.xz, made
#     from the vllm-0.33.0 wheel), unpacked and put FIRST on PYTHONPATH, ahead of the devkernels copy;
#     prints the files Python loaded and runs two FA3 conformance claims against the reference. Every
#     later step imports vLLM's FA3/FA4 fork from there too.
# (a) the default main job (tiny, bf16 on the GPU) and `kselect run` for E4B and 31B, bf16 and FP8
#     cache (default rules, vllm_0_33_0), and bench/gemma4/e2e.py for E4B and 31B (rules vllm_0_33_0 and
#     the seed's base, post_pr52987, bf16 and FP8): each per-call numerics check must print ok.
# (b) the refuted path: 31B FP8 under `rules=post_pr52987 overlay=[pr48666]` with a 1,561-token prompt
#     (bench/h200/long_prompt.py), past the 1,024-token window, so the FA4 fork's windowed FP8 path at
#     head 256 runs (tests/gemma4/test_pr48666_window_path.py checks on CPU that it does): `kselect run`
#     must exit non-zero; e2e.py's pr48666 FP8 rows (prompts window + 64) must say WRONG and e2e exit 1.
# $OUT gets: summary.txt (one line per expectation, PASS/FAIL), run.log (everything), versions.txt,
# e2e/e2e.json, e2e/e2e.md. Exit 0 when every expectation holds. e2e.py gets what is left of
# DEADLINE_S (570 s) after the other steps, so the script ends inside a 600 s call.
set -u
OUT=${OUT:-/tmp/issue14_out}
FA_TAR=${FA_TAR:-.gpu14/vllm_fa_install.tar.xz}
FA_DIR=${FA_DIR:-/tmp/issue14_vllm_fa}
mkdir -p "$OUT"
LOG=$OUT/run.log
SUMMARY=$OUT/summary.txt
: > "$LOG"
: > "$SUMMARY"
export PYTHONUNBUFFERED=1
fails=0

say() { echo "$*" | tee -a "$SUMMARY" "$LOG"; }
expect() {  # expect NAME WANT(0|nonzero) RC
  local ok=FAIL
  if { [ "$2" = 0 ] && [ "$3" = 0 ]; } || { [ "$2" = nonzero ] && [ "$3" != 0 ]; }; then ok=PASS; fi
  [ $ok = PASS ] || fails=$((fails + 1))
  say "$ok  $1: exit $3 (want $2)"
}
run() {  # run NAME SECONDS CMD...: log the command and its output, set RC
  local name=$1 secs=$2
  shift 2
  START=$(($(wc -l < "$LOG") + 1))
  echo "=== [$name] $* ($(date -u +%T))" | tee -a "$LOG"
  timeout "$secs" "$@" 2>&1 | tee -a "$LOG"
  RC=${PIPESTATUS[0]}
  echo "=== [$name] exit $RC ($(date -u +%T))" | tee -a "$LOG"
}
numerics_ok() {  # numerics_ok NAME: the last run's per-call verdict line says ok
  local line
  line=$(tail -n +"$START" "$LOG" | grep -E '^numerics: (each attention call|not checked)' | tail -1)
  if [[ $line == *": ok" ]]; then say "PASS  $1: $line"; else fails=$((fails + 1)); say "FAIL  $1: ${line:-no numerics line}"; fi
}

# ---------------------------------------------------------------- (c) FA3 from install_vllm_fa.sh's output
rm -rf "$FA_DIR" && mkdir -p "$FA_DIR"
if tar xJf "$FA_TAR" -C "$FA_DIR"; then
  say "unpacked $FA_TAR ($(du -sh "$FA_DIR" | cut -f1)) into $FA_DIR"
else
  fails=$((fails + 1)); say "FAIL  (c) cannot unpack $FA_TAR (carry .gpu14)"
fi
export PYTHONPATH=$FA_DIR:$PWD${PYTHONPATH:+:$PYTHONPATH}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  python3 -c "from kselect.provenance import project_commit, versions; print(project_commit()); print(versions())"
  echo "PYTHONPATH=$PYTHONPATH"
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt" >> "$LOG"

run c_fa3 120 python3 - "$FA_DIR" <<'PY'
import glob, os, sys
fa_dir = os.path.realpath(sys.argv[1])
from kselect.kernels.flash_attn_loader import load_fa3
from kselect.conformance import check_claim
build = load_fa3("vllm")
import vllm, vllm.vllm_flash_attn as vfa, vllm.vllm_flash_attn.flash_attn_interface as iface
libs = sorted(glob.glob(os.path.join(os.path.dirname(vfa.__file__), "_vllm_fa3_C*.so")))
loaded = [vllm.__file__, vfa.__file__, iface.__file__, *libs]
with open("/proc/self/maps") as f:
    mapped = sorted({line.split()[-1] for line in f if "_vllm_fa3_C" in line})
for p in loaded:
    print("loaded from:", os.path.realpath(p))
for p in mapped:
    print("mapped .so:", p)
bad = [p for p in loaded + mapped if not os.path.realpath(p).startswith(fa_dir + os.sep)]
if bad or not mapped:
    sys.exit(f"FA3 NOT from {fa_dir}: {bad or 'the FA3 library is not mapped'}")
print(f"FA3 build {build.label} is the install_vllm_fa.sh copy in {fa_dir}")
worst = "verified"
for claim in ("FLASH_ATTN_v3:bf16:d256:window", "FLASH_ATTN_v3:fp8:d256:window"):
    r = check_claim(claim, "cuda")
    print(claim, r)
    worst = worst if r["status"] == "verified" else r["status"]
sys.exit(0 if worst == "verified" else 1)
PY
expect "(c) FA3 from install_vllm_fa.sh's output, two claims verified" 0 "$RC"

# ---------------------------------------------------------------- (a) main jobs: per-call check ok
run a_tiny 90 python3 -m kselect run
expect "(a) kselect run (default: tiny, bf16 on the GPU)" 0 "$RC"; numerics_ok "(a) tiny per-call check"
for m in gemma4_e4b gemma4_31b; do
  for kv in auto fp8; do
    run "a_${m}_$kv" 120 python3 -m kselect run platform=auto model=$m kv_cache=$kv --max-new-tokens 4
    expect "(a) kselect run model=$m kv_cache=$kv" 0 "$RC"; numerics_ok "(a) $m kv=$kv per-call check"
  done
done

# ---------------------------------------------------------------- (b) pr48666 31B FP8 past the window
PROMPT=$(python3 bench/h200/long_prompt.py 1536)
run b_pr48666 150 python3 -m kselect run platform=auto model=gemma4_31b kv_cache=fp8 rules=post_pr52987 \
  'overlay=[pr48666]' --prompt "$PROMPT" --max-new-tokens 4
expect "(b) pr48666 31B FP8, 1,561-token prompt (refuted windowed FA4 FP8 path)" nonzero "$RC"
tail -n +"$START" "$LOG" | grep -E '^  (sliding|full)_attention: |^numerics: each|Error' | head -4 | sed 's/^/      /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------- (a)+(b) e2e.py, E4B and 31B
left=$((${DEADLINE_S:-570} - SECONDS))  # the whole script stays inside one 10-minute device call
[ "$left" -gt 90 ] || left=90
run e2e "$left" python3 bench/gemma4/e2e.py --out "$OUT/e2e" --presets gemma4_e4b gemma4_31b \
  --selections vllm_0_33_0 pr48666 base --kv auto fp8 --batches 1 --no-e4b-batch-64 --new 16 --reps 1 \
  --no-hf --budget-s $((left - 30))
expect "(b) e2e.py exits 1 (its pr48666 FP8 rows are WRONG)" nonzero "$RC"
python3 - "$OUT/e2e/e2e.json" <<'PY' | tee -a "$SUMMARY" "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
bad = 0
for r in d["selections"]:
    n = r.get("numerics") or {}
    got = n.get("verdict") or r.get("error") or "not run"
    want = "WRONG" if (r["selection"] == "pr48666" and r["kv"] == "fp8") else "ok"
    ok = got == want or (want == "WRONG" and "error" in r)
    bad += not ok
    be = "/".join(g["backend"] for g in r.get("groups", {}).values())
    print(f"{'PASS' if ok else 'FAIL'}  (a/b) e2e {r['preset']} {r['selection']} kv={r['kv']} [{be}]: {got} (want {want}), "
          f"per-call max rel err {n.get('attention_max_rel_err')}, drift {n.get('max_rel_err')}"
          + (f" (same as {r['same_as']})" if "same_as" in r else ""))
for what in ("errors", "skipped"):
    print(f"{what}: " + ("; ".join(d.get(what) or []) or "none"))
presets = {r["preset"] for r in d["selections"]}
print(f"{'PASS' if presets == {'gemma4_e4b', 'gemma4_31b'} else 'FAIL'}  e2e presets checked: {sorted(presets)}")
sys.exit(1 if bad or d.get("skipped") or d.get("errors") or presets != {"gemma4_e4b", "gemma4_31b"} else 0)
PY
[ "${PIPESTATUS[0]}" = 0 ] || fails=$((fails + 1))

say "issue14_checks: $fails expectation(s) failed"
[ "$fails" = 0 ]
