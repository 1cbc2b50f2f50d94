#!/usr/bin/env bash
# The CUDA checks in one command, on a machine with an NVIDIA GPU (docs/CUDA.md):
#   1. build     build-gpu: Release, KESTREL_CUDA=ON, KESTREL_CUDA_ARCHS = this GPU's only (nvidia-smi)
#   2. ctest     ctest -L cuda (unit, ops, models, speculative on the real device)
#   3. memcheck  compute-sanitizer --tool memcheck on tests/test_ops (one test case per kernel family)
#   4. synth     Llama-3.1-8B-shaped random models, one per type, and a Qwen3-30B-A3B-shaped MoE
#                one (reused when present), made in the background from the start, while the
#                tests run; at most two ahead of the bench, which deletes each one it is done
#                with but the first (disk: the 8B set and the MoE model are ~60 GB together)
#   5. bench     kestrel bench -d cuda -p 512 -n 128 -r 3 on each (as soon as it exists), and tg
#                again with KESTREL_CUDA_KERNELS=reference (the part-1 kernels) and with
#                KESTREL_CUDA_GRAPHS=0 (no step graphs); a markdown table last, with kestrel perf's
#                prediction for this GPU's nominal profile beside the measurement
#   6. perop     kestrel bench --per-op, tg32, on the first type: where a decode step's time goes;
#                and --trace of a tg8 run (trace-cuda.json: each kernel on the "cuda stream" track)
#   7. ncu       Nsight Compute on decode kernels of the first type (launches GPU_SUITE_NCU_SKIP
#                on, GPU_SUITE_NCU_COUNT of them, no graphs): each kernel's time, DRAM throughput
#                and occupancy, as a table (tools/dev/ncu_table.py) at the end of the summary
# Every step runs even when one before it failed (those needing the build are skipped without
# one); each one's status is printed, and the exit status is 1 when any failed.
#
#   tools/dev/gpu_suite.sh                      run it
#   tools/dev/gpu_suite.sh --prebuilt .dev/gpu  run it on binaries built elsewhere and packed by
#                                               tools/dev/gpu_pack.sh (no build step; its test data)
#   GPU_SUITE_DRY=1 tools/dev/gpu_suite.sh      print the commands instead of running them
#   tools/dev/gpu_suite.sh --fetch-deps [DIR]   (on a machine with apt) unpack the build's
#                                               libraries into DIR (build-gpu-deps) for a GPU
#                                               machine without them; used when present
# Environment (defaults in brackets):
#   BUILD_DIR [build-gpu]  KESTREL_CUDA_ARCHS [from nvidia-smi's compute_cap, else 90a]
#   KESTREL_TESTDATA [../shared/testdata or shared/testdata, when present]
#   OUT: logs go to $OUT/gpu_suite_logs (else $BUILD_DIR/gpu_suite_logs): 9 files
#   GPU_SUITE_MODELS [/tmp/gpu_suite]: the synthesized models (never under $OUT)
#   GPU_SUITE_TYPES ["q4_0 q8_0 q4_K fp8_e4m3 bf16"]  GPU_SUITE_PRESET [llama-3.1-8b]
#   GPU_SUITE_EXTRA ["qwen3-30b-a3b:q4_0"]: more PRESET:TYPE models after those (empty: none)
#   GPU_SUITE_KEEP_MODELS [0]: 1 keeps every model (for reruns; needs the disk for all of them)
#   GPU_SUITE_PP [512] GPU_SUITE_TG [128] GPU_SUITE_REPS [3]
#   GPU_SUITE_MEMCHECK_FILTER [doctest -tc patterns below; empty: all of test_ops]
#   GPU_SUITE_CTEST_TIMEOUT [900 s, each test]  GPU_SUITE_MEMCHECK_TIMEOUT [300 s]
#   GPU_SUITE_SKIP [none; e.g. "memcheck synth bench"]
#   GPU_SUITE_DEPS [build-gpu-deps when present]: a folder of unpacked .deb files
#   GPU_SUITE_NCU_SKIP [400] GPU_SUITE_NCU_COUNT [40] GPU_SUITE_NCU_TIMEOUT [120 s]
# shellcheck disable=SC2317  # the do_* step functions are called through step()
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEP_PACKAGES=(libpcre2-dev libpcre2-8-0 nlohmann-json3-dev doctest-dev)

# ---- --fetch-deps: the libraries CMake needs, unpacked (no root needed, nothing installed) ----
if [[ ${1:-} == --fetch-deps ]]; then
  dir=${2:-$ROOT/build-gpu-deps}
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download "${DEP_PACKAGES[@]}")
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir"; done
  echo "unpacked ${DEP_PACKAGES[*]} into $dir (gpu_suite.sh uses $ROOT/build-gpu-deps when present," \
    "else GPU_SUITE_DEPS=$dir)"
  exit 0
fi
PREBUILT=
if [[ ${1:-} == --prebuilt && $# -eq 2 ]]; then
  PREBUILT=$(cd "$2" && pwd)
  shift 2
fi
if [[ $# -gt 0 ]]; then
  sed -n '2,/^# shellcheck/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $1 == -h || $1 == --help ]] && exit 0
  exit 2
fi

DRY=${GPU_SUITE_DRY:-0}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
# --prebuilt: the packed build goes back to the path it was built at (its CTest files name it).
if [[ -n $PREBUILT ]]; then
  [[ -f $PREBUILT/build.tar.xz && -f $PREBUILT/build_path ]] || { echo "no gpu_pack.sh output in $PREBUILT" >&2; exit 2; }
  BUILD=$(cat "$PREBUILT/build_path")
  mkdir -p "$BUILD" "$BUILD/packed-testdata"
  tar xJf "$PREBUILT/build.tar.xz" -C "$BUILD"
  [[ ! -f $PREBUILT/testdata.tar.xz ]] || tar xJf "$PREBUILT/testdata.tar.xz" -C "$BUILD/packed-testdata"
  KESTREL_TESTDATA=${KESTREL_TESTDATA:-$BUILD/packed-testdata/testdata}
  GPU_SUITE_SKIP="build ${GPU_SUITE_SKIP:-}"
fi
LOGS=${OUT:+$OUT/gpu_suite_logs}
LOGS=${LOGS:-$BUILD/gpu_suite_logs}
MODELS=${GPU_SUITE_MODELS:-/tmp/gpu_suite}
PRESET=${GPU_SUITE_PRESET:-llama-3.1-8b}
read -r -a TYPES <<<"${GPU_SUITE_TYPES:-q4_0 q8_0 q4_K fp8_e4m3 bf16}"
read -r -a EXTRA <<<"${GPU_SUITE_EXTRA-qwen3-30b-a3b:q4_0}"
# The models, as PRESET:TYPE; the first one also serves the perop step.
ENTRIES=()
for t in "${TYPES[@]}"; do ENTRIES+=("$PRESET:$t"); done
ENTRIES+=("${EXTRA[@]}")
KEEP_MODELS=${GPU_SUITE_KEEP_MODELS:-0}
PP=${GPU_SUITE_PP:-512}
TG=${GPU_SUITE_TG:-128}
REPS=${GPU_SUITE_REPS:-3}
SKIP=" ${GPU_SUITE_SKIP:-} "
# One test case per kernel family (the whole of test_ops under memcheck may outlast the suite).
MEMCHECK_FILTER=${GPU_SUITE_MEMCHECK_FILTER-'*GET_ROWS: every type*,*row-wise*,*MATMUL: every weight type*,*ROPE*,*KV_STORE and ATTENTION*,*MATMUL_ID: every weight type*,*MATMUL_ID of many tokens*,*MATMUL: the integer-code types*,*TOP_K*'}
MEMCHECK_TIMEOUT=${GPU_SUITE_MEMCHECK_TIMEOUT:-300}
NCU_SKIP=${GPU_SUITE_NCU_SKIP:-400}
NCU_COUNT=${GPU_SUITE_NCU_COUNT:-40}
NCU_TIMEOUT=${GPU_SUITE_NCU_TIMEOUT:-120}
CTEST_TIMEOUT=${GPU_SUITE_CTEST_TIMEOUT:-900}
KESTREL="$BUILD/kestrel"
JOBS=$(nproc 2>/dev/null || echo 4)

# The device's SASS target: compute capability 9.0 -> 90a (wgmma and friends), 10.x -> 10xa,
# 12.x -> 120f (the sm_120 family's block-scaled MMA), else XY.
detect_arch() {
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ') || cc=
  case $cc in
    9.0) echo 90a ;;
    10.*) echo "${cc/./}a" ;;
    12.*) echo 120f ;;
    [0-9]*.[0-9]) echo "${cc/./}" ;;
    *) echo 90a ;;
  esac
}
ARCHS=${KESTREL_CUDA_ARCHS:-$(detect_arch)}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) || GPU_NAME=
GPU_NAME=${GPU_NAME:-no GPU found by nvidia-smi}
# kestrel perf's nominal profile of this GPU, for the predicted columns of the table.
case $GPU_NAME in
  *H200*) PERF_HW=h200 ;;
  *B200*) PERF_HW=b200 ;;
  *"RTX 6000 Ada"*) PERF_HW=rtx-6000-ada ;;
  *) PERF_HW=h100-sxm ;;
esac

if [[ -z ${KESTREL_TESTDATA:-} ]]; then
  for d in "$ROOT/../shared/testdata" "$ROOT/shared/testdata"; do
    if [[ -d $d ]]; then KESTREL_TESTDATA=$(cd "$d" && pwd); break; fi
  done
fi
[[ -z ${KESTREL_TESTDATA:-} ]] || export KESTREL_TESTDATA

# Libraries from --fetch-deps: their pkg-config files name prefix=/usr, so copies point here.
CMAKE_EXTRA=()
DEPS=${GPU_SUITE_DEPS:-}
if [[ -z $DEPS && -d $ROOT/build-gpu-deps ]]; then DEPS=$ROOT/build-gpu-deps; fi
if [[ -n $DEPS && $DRY != 1 ]]; then
  DEPS=$(cd "$DEPS" && pwd)
  pcdir=$BUILD/deps-pkgconfig
  mkdir -p "$pcdir"
  for pc in "$DEPS"/usr/lib/*/pkgconfig/*.pc "$DEPS"/usr/share/pkgconfig/*.pc; do
    if [[ -f $pc ]]; then sed "s|^prefix=/usr\$|prefix=$DEPS/usr|" "$pc" >"$pcdir/$(basename "$pc")"; fi
  done
  export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$DEPS/usr")
fi

TMP=$BUILD/gpu_suite_tmp  # bench JSON, parsed for the table (not under $OUT: its file count is capped)
if [[ $DRY != 1 ]]; then mkdir -p "$LOGS" "$TMP" && rm -f "$TMP/bench_over"; fi

# run CMD...: runs it, or prints it under GPU_SUITE_DRY=1.
run() {
  if [[ $DRY == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# step NAME LOG FUNCTION: runs FUNCTION with its output appended to $LOGS/LOG; records the status.
STEP_NAMES=()
STEP_STATUS=()
FAILED=0
step() {
  local name=$1 log=$LOGS/$2 fn=$3 rc=0 t0=$SECONDS status
  if [[ $SKIP == *" $name "* ]]; then
    status="skipped (GPU_SUITE_SKIP)"
  elif [[ $name != build && ${BUILD_OK:-0} != 1 && $DRY != 1 ]]; then
    status="skipped (no build)"
  else
    echo "== $name (log: $log)"
    if [[ $DRY == 1 ]]; then
      "$fn" || rc=$?
    else
      { echo "== $name: $(date -u '+%F %T') UTC"; "$fn"; } >>"$log" 2>&1 || rc=$?
    fi
    if [[ $DRY == 1 ]]; then status="dry run"
    elif [[ $rc == 0 ]]; then status="ok"
    else status="FAILED (exit $rc)"; FAILED=1
    fi
    status+=" in $((SECONDS - t0)) s"
  fi
  echo "== $name: $status"
  STEP_NAMES+=("$name")
  STEP_STATUS+=("$status")
}

# ---- 1. build ------------------------------------------------------------------------------
do_build() {
  # (Inside step's `|| rc=$?` set -e is off: each command's failure is returned by hand.)
  run cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON \
    -DKESTREL_CUDA_EMULATE=OFF "-DKESTREL_CUDA_ARCHS=$ARCHS" "${CMAKE_EXTRA[@]}" || return
  # Only what the steps run: the CLI and the test binaries of the tests labelled cuda
  # (kestrel_test_dir names them test_<name>); everything when one is not a target.
  local targets=(kestrel_cli) names all n
  if [[ $DRY == 1 ]]; then
    targets+=(test_unit test_ops test_models test_speculative)
  else
    names=$(cd "$BUILD" && ctest -N -L cuda 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p') || return
    all=$(ninja -C "$BUILD" -t targets all) || return
    for n in $names; do
      if grep -q "^test_$n:" <<<"$all"; then targets+=("test_$n"); else targets=(all); break; fi
    done
  fi
  run cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
}

# ---- 2. ctest -L cuda ------------------------------------------------------------------------
do_ctest() {
  echo "KESTREL_TESTDATA=${KESTREL_TESTDATA:-(none: tests needing it skip)}"
  run ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout "$CTEST_TIMEOUT" -j 4
}

# ---- 3. compute-sanitizer memcheck on test_ops --------------------------------------------
SANITIZER=$(command -v compute-sanitizer || true)
if [[ -z $SANITIZER && -x /usr/local/cuda/bin/compute-sanitizer ]]; then SANITIZER=/usr/local/cuda/bin/compute-sanitizer; fi
do_memcheck() {
  local sanitizer=$SANITIZER
  if [[ -z $sanitizer ]]; then
    echo "compute-sanitizer: not on PATH nor in /usr/local/cuda/bin"
    [[ $DRY == 1 ]] || return 1
    sanitizer=compute-sanitizer
  fi
  local filter=()
  [[ -z $MEMCHECK_FILTER ]] || filter=("-tc=$MEMCHECK_FILTER")
  echo "test cases: ${MEMCHECK_FILTER:-all}"
  run timeout "$MEMCHECK_TIMEOUT" "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$BUILD/tests/test_ops" "${filter[@]}"
}

# ---- 4. synth (in the background from the start; the bench waits for each model) ------------
model_path() { echo "$MODELS/${1%%:*}-${1##*:}.gguf"; }  # of an entry PRESET:TYPE
entry_key() { echo "${1%%:*}-${1##*:}"; }
SYNTH_PID=
# wait_model ENTRY: until its model exists or the background synth has ended.
wait_model() {
  while [[ ! -s $(model_path "$1") && -n $SYNTH_PID ]] && kill -0 "$SYNTH_PID" 2>/dev/null; do sleep 2; done
}
do_synth() {
  run mkdir -p "$MODELS" || return
  run "$KESTREL" synth --list || return
  local i e m rc=0
  for i in "${!ENTRIES[@]}"; do
    e=${ENTRIES[$i]}
    m=$(model_path "$e")
    if [[ -s $m ]]; then
      echo "reusing $m"
      continue
    fi
    # Two ahead of the bench at most: it deletes each model it is done with (but the first).
    if [[ $DRY != 1 && $KEEP_MODELS != 1 && $i -ge 3 ]]; then
      while [[ -s $(model_path "${ENTRIES[$((i - 2))]}") && ! -e $TMP/bench_over ]]; do sleep 2; done
    fi
    # Written under a temporary name: an interrupted run leaves nothing to be reused.
    if run "$KESTREL" synth "${e%%:*}" --type "${e##*:}" -t "$JOBS" -o "$m.partial"; then
      run mv "$m.partial" "$m"
    else
      rc=1
    fi
  done
  [[ $DRY == 1 ]] || df -h "$MODELS"
  return "$rc"
}

# ---- 5. bench ------------------------------------------------------------------------------
do_bench() {
  local i e t m rc=0
  for i in "${!ENTRIES[@]}"; do
    e=${ENTRIES[$i]}
    t=$(entry_key "$e")
    m=$(model_path "$e")
    echo "--- $m"
    [[ $DRY == 1 ]] || wait_model "$e"
    if [[ $DRY != 1 && ! -s $m ]]; then
      echo "missing (synth failed?)"
      rc=1
      continue
    fi
    if [[ $DRY == 1 ]]; then
      run "$KESTREL" bench -d cuda -m "$m" -p "$PP" -n "$TG" -r "$REPS" --json
    elif "$KESTREL" bench -d cuda -m "$m" -p "$PP" -n "$TG" -r "$REPS" --json >"$TMP/bench-$t.json"; then
      cat "$TMP/bench-$t.json"
    else
      rc=1
      rm -f "$TMP/bench-$t.json"
    fi
    # What kestrel perf predicts for it on this GPU's nominal profile (the table shows both).
    if [[ $DRY != 1 ]]; then
      "$KESTREL" perf -m "$m" --hw "$PERF_HW" -p "$PP" --ctx $((TG / 2)) --json >"$TMP/perf-$t.json" 2>/dev/null ||
        rm -f "$TMP/perf-$t.json"
    fi
    # The same decode on the part-1 kernels only (what the fast kernels gain), and with every
    # kernel launched rather than replayed from a CUDA graph (what graphs gain), side by side.
    bench_variant "$m" "$t-ref" KESTREL_CUDA_KERNELS=reference || rc=1
    bench_variant "$m" "$t-nograph" KESTREL_CUDA_GRAPHS=0 || rc=1
    # Prefill other ways: on Hopper's wgmma (opt-in until measured; BF16's dense GEMMs TMA-fed,
    # matmul_f16_tma.cu; cuBLAS off, or it takes the 16-bit batches), BF16 on Kestrel's mma.sync tiles instead of cuBLAS, and the
    # integer types dequantized to F16 for cuBLAS (the baseline mmq.cu is measured against).
    if [[ $t == *bf16* || $t == *q4_0* ]]; then
      bench_variant "$m" "$t-wgmma" "KESTREL_CUDA_WGMMA=1 KESTREL_CUDA_CUBLAS=0" "-p $PP -n 0" || rc=1
    fi
    if [[ $t == *bf16* ]]; then bench_variant "$m" "$t-tiles" KESTREL_CUDA_CUBLAS=0 "-p $PP -n 0" || rc=1; fi
    if [[ $t == *q4_0* || $t == *q4_K* ]]; then bench_variant "$m" "$t-cublas" KESTREL_CUDA_CUBLAS=dequant "-p $PP -n 0" || rc=1; fi
    if [[ $i -gt 0 && $KEEP_MODELS != 1 ]]; then run rm -f "$m"; fi
  done
  return "$rc"
}

# tg alone (or the tests $4, e.g. "-p 512 -n 0") on model $1 with the environment settings $3
# (space-separated), into $TMP/bench-$2.json.
bench_variant() {
  local tests vars
  read -r -a tests <<<"${4:--p 0 -n $TG}"
  read -r -a vars <<<"$3"
  if [[ $DRY == 1 ]]; then
    run env "${vars[@]}" "$KESTREL" bench -d cuda -m "$1" "${tests[@]}" -r "$REPS" --json
  elif env "${vars[@]}" "$KESTREL" bench -d cuda -m "$1" "${tests[@]}" -r "$REPS" --json >"$TMP/bench-$2.json"; then
    cat "$TMP/bench-$2.json"
  else
    rm -f "$TMP/bench-$2.json"
    return 1
  fi
}

# ---- 6. perop ------------------------------------------------------------------------------
do_perop() {
  local m
  m=$(model_path "${ENTRIES[0]}")
  [[ $DRY == 1 ]] || wait_model "${ENTRIES[0]}"
  if [[ $DRY != 1 && ! -s $m ]]; then
    echo "missing $m (synth failed?)"
    return 1
  fi
  run "$KESTREL" bench -d cuda -m "$m" -p 0 -n 32 -r 1 --per-op || return 1
  run "$KESTREL" bench -d cuda -m "$m" -p 0 -n 8 -r 1 --trace "$LOGS/trace-cuda.json" || return 1
  # The trace's kernels by total time (the device's own clock, between CUDA events).
  [[ $DRY == 1 ]] || python3 - "$LOGS/trace-cuda.json" <<'PY'
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tid = {e["tid"] for e in ev if e["name"] == "thread_name" and e["args"]["name"] == "cuda stream"}
tot = collections.Counter()
for e in ev:
    if e["ph"] == "X" and e["tid"] in tid:
        tot[e["name"]] += e["dur"]
print("| kernel (traced, tg8) | ms |\n|---|---:|")
for name, us in tot.most_common(12):
    print("| %s | %.2f |" % (name, us / 1e3))
if not tot:
    sys.exit("no kernel spans in the trace")
PY
}

# ---- 7. ncu ---------------------------------------------------------------------------------
NCU=$(command -v ncu || true)
if [[ -z $NCU && -x /usr/local/cuda/bin/ncu ]]; then NCU=/usr/local/cuda/bin/ncu; fi
do_ncu() {
  local m ncu=$NCU
  m=$(model_path "${ENTRIES[0]}")
  if [[ -z $ncu ]]; then
    echo "ncu: not on PATH nor in /usr/local/cuda/bin"
    [[ $DRY == 1 ]] || return 1
    ncu=ncu
  fi
  if [[ $DRY != 1 && ! -s $m ]]; then
    echo "missing $m (synth failed?)"
    return 1
  fi
  # The card's clocks as found (--clock-control none); launched, not replayed, kernels.
  local cmd=(env KESTREL_CUDA_GRAPHS=0 timeout "$NCU_TIMEOUT" "$ncu" --clock-control none --launch-skip "$NCU_SKIP"
    --launch-count "$NCU_COUNT" --section SpeedOfLight --section LaunchStats --section Occupancy
    "$KESTREL" bench -d cuda -m "$m" -p 0 -n 8 -r 1)
  if [[ $DRY == 1 ]]; then
    run "${cmd[@]}"
    return
  fi
  "${cmd[@]}" >"$TMP/ncu.txt" || return
  python3 "$ROOT/tools/dev/ncu_table.py" "$TMP/ncu.txt" | tee "$TMP/ncu_table.md"
}

# One row of the table from a bench JSON (nlohmann's dump(2): one key a line, 4 spaces in).
bench_row() {
  awk -v pp="$PP" -v tg="$TG" -v gpu="$GPU_NAME" '
    function num(s) { sub(/^[^:]*: */, "", s); sub(/,$/, "", s); return s + 0 }
    function str(s) { sub(/^[^:]*: *"/, "", s); sub(/",?$/, "", s); return s }
    /^  \{/ { np = ng = ts = sh = bw = 0; src = "" }
    /^    "n_prompt":/ { np = num($0) }
    /^    "n_gen":/ { ng = num($0) }
    /^    "avg_ts":/ { ts = num($0) }
    /^    "dram_share":/ { sh = num($0) }
    /^    "bandwidth_gbs":/ { bw = num($0) }
    /^    "bandwidth_source":/ { src = str($0) }
    /^    "device":/ { dev = str($0) }
    /^    "backend":/ { be = str($0) }
    /^  \}/ {
      if (np == pp) pps = sprintf("%.1f", ts)
      if (ng == tg) { tgs = sprintf("%.1f", ts); share = sprintf("%.0f%% of %.0f GB/s (%s)", 100 * sh, bw, src) }
    }
    END {
      if (dev == "") dev = gpu " (" be ": no device bandwidth)"
      printf "%s\t%s\t%s\t%s\n", dev, (pps == "" ? "-" : pps), (tgs == "" ? "-" : tgs), (share == "" ? "-" : share)
    }' "$1"
}

summary() {
  local i e t f row dev pps tgs share predicted
  echo
  echo "gpu_suite: $GPU_NAME, KESTREL_CUDA_ARCHS=$ARCHS, build $BUILD, logs $LOGS"
  for i in "${!STEP_NAMES[@]}"; do printf '  %-9s %s\n' "${STEP_NAMES[$i]}" "${STEP_STATUS[$i]}"; done
  echo
  echo "| device | model | type | pp$PP t/s | tg$TG t/s | tg$TG % of measured bandwidth | tg$TG t/s, part-1 kernels | tg$TG t/s, no CUDA graphs | predicted pp / tg t/s ($PERF_HW) |"
  echo "|---|---|---|---:|---:|---|---:|---:|---:|"
  for e in "${ENTRIES[@]}"; do
    t=$(entry_key "$e")
    f=$TMP/bench-$t.json
    if [[ -s $f ]]; then
      row=$(bench_row "$f")
      IFS=$'\t' read -r dev pps tgs share <<<"$row"
    else
      dev=$GPU_NAME pps=- tgs=- share="- (no bench result)"
    fi
    ref_tgs=- nograph_tgs=-
    if [[ -s $TMP/bench-$t-ref.json ]]; then
      IFS=$'\t' read -r _ _ ref_tgs _ <<<"$(bench_row "$TMP/bench-$t-ref.json")"
    fi
    if [[ -s $TMP/bench-$t-nograph.json ]]; then
      IFS=$'\t' read -r _ _ nograph_tgs _ <<<"$(bench_row "$TMP/bench-$t-nograph.json")"
    fi
    predicted=-
    if [[ -s $TMP/perf-$t.json ]]; then
      predicted=$(awk '/^  "prefill_tok_s":/ { sub(/.*: */, ""); pp = $0 + 0 } /^  "decode_tok_s":/ { sub(/.*: */, ""); tg = $0 + 0 }
        END { printf "%.0f / %.1f", pp, tg }' "$TMP/perf-$t.json")
    fi
    echo "| $dev | ${e%%:*} | ${e##*:} | $pps | $tgs | $share | $ref_tgs | $nograph_tgs | $predicted |"
  done
  if [[ -s $TMP/ncu_table.md ]]; then
    echo
    echo "Nsight Compute, decode kernels of ${ENTRIES[0]} (launches from $NCU_SKIP on; rows merge a kernel's launches of one grid):"
    echo
    cat "$TMP/ncu_table.md"
  fi
  local how
  for f in "$TMP"/bench-*-wgmma.json "$TMP"/bench-*-tiles.json "$TMP"/bench-*-cublas.json; do
    [[ -s $f ]] || continue
    IFS=$'\t' read -r _ pps _ _ <<<"$(bench_row "$f")"
    case $f in
      *-wgmma.json) how="on wgmma tiles (KESTREL_CUDA_WGMMA=1 KESTREL_CUDA_CUBLAS=0)" ;;
      *-tiles.json) how="on the mma.sync tiles (KESTREL_CUDA_CUBLAS=0)" ;;
      *) how="dequantized for cuBLAS (KESTREL_CUDA_CUBLAS=dequant)" ;;
    esac
    echo
    echo "$(basename "$f" .json | sed 's/^bench-//'): pp$PP t/s $how: $pps"
  done
}

echo "gpu_suite: $GPU_NAME; KESTREL_CUDA_ARCHS=$ARCHS; ${JOBS} jobs; logs in $LOGS${DEPS:+; libraries from $DEPS}"
if [[ $DRY == 1 ]]; then echo "(GPU_SUITE_DRY=1: printing the commands, running none)"; fi
BUILD_OK=0
step build build.log do_build
# A skipped build step uses what $BUILD_DIR already holds.
if [[ ${STEP_STATUS[0]} == ok* || (${STEP_STATUS[0]} == skipped* && -x $KESTREL) ]]; then BUILD_OK=1; fi
if [[ $DRY == 1 || $BUILD_OK != 1 || $SKIP == *" synth "* ]]; then
  step synth synth.log do_synth
else
  echo "== synth: started in the background (log: $LOGS/synth.log)"
  { echo "== synth: $(date -u '+%F %T') UTC"; do_synth; } >>"$LOGS/synth.log" 2>&1 &
  SYNTH_PID=$!
  SYNTH_T0=$SECONDS
fi
step ctest ctest.log do_ctest
step memcheck memcheck.log do_memcheck
step bench bench.log do_bench
[[ $DRY == 1 ]] || touch "$TMP/bench_over"  # (the synth waits on the bench no more)
step perop perop.log do_perop
step ncu ncu.log do_ncu
if [[ -n $SYNTH_PID ]]; then  # its status, now that the bench has waited for every model
  rc=0
  wait "$SYNTH_PID" || rc=$?
  if [[ $rc == 0 ]]; then status="ok"; else status="FAILED (exit $rc)"; FAILED=1; fi
  STEP_NAMES+=(synth)
  STEP_STATUS+=("$status in $((SECONDS - SYNTH_T0)) s (in the background)")
  echo "== synth: ${STEP_STATUS[-1]}"
fi
if [[ $DRY == 1 ]]; then summary; else summary | tee "$LOGS/summary.md"; fi
exit "$FAILED"
