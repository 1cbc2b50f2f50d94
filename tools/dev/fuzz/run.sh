#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz: clang, ASan + UBSan, KESTREL_FUZZ=ON), generates the
# seed corpus, runs every tools/dev/fuzz/fuzz_*.cpp target for SECONDS (default 60) and prints,
# per target, the executions and libFuzzer's final coverage (cov: edges, ft: features). Fails
# when any target finds a crash, a sanitizer report, a leak, an out-of-memory or a timeout; the
# reproducer's file name is in the output (replay: build-fuzz/fuzz/<target> <file>).
#
#   tools/dev/fuzz/run.sh [SECONDS]      CI runs 45 s per target; `make fuzz` 600 s
#
# Environment: FUZZ_BUILD (build-fuzz), FUZZ_JOBS (build parallelism, nproc), FUZZ_PARALLEL
# (targets run at once, nproc), FUZZ_CXX / FUZZ_CC (clang++-14 or clang++), KESTREL_BUILD_LOCK (a file to flock around the build when several
# builds share the machine; /tmp/kestrel-build.lock when it exists), FUZZ_TARGETS (a subset).
set -euo pipefail
cd "$(dirname "$0")/../../.."
SECONDS_PER_TARGET="${1:-60}"
BUILD="${FUZZ_BUILD:-build-fuzz}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
CXX_BIN="${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
CC_BIN="${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}"
if [ -z "$CXX_BIN" ] || [ -z "$CC_BIN" ]; then
  echo "fuzz: clang is needed (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
LOCK="${KESTREL_BUILD_LOCK:-/tmp/kestrel-build.lock}"
locked() {  # runs "$@" holding the shared build lock, when there is one
  if [ -e "$LOCK" ] && command -v flock >/dev/null; then flock "$LOCK" "$@"; else "$@"; fi
}

# ---- build ------------------------------------------------------------------------------------
start=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  locked cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_C_COMPILER="$CC_BIN" \
    -DCMAKE_CXX_COMPILER="$CXX_BIN" -DKESTREL_FUZZ=ON -DKESTREL_TESTS=OFF -DKESTREL_CUDA=OFF >/dev/null
fi
locked cmake --build "$BUILD" --target fuzz -j "$JOBS"
echo "fuzz: build took $(( $(date +%s) - start )) s"

# ---- seeds ------------------------------------------------------------------------------------
CORPUS="$BUILD/corpus"
"$BUILD/fuzz/kestrel_fuzz_seeds" "$PWD" "$CORPUS"

# Longest input per target (libFuzzer's -max_len); the seeds fit.
max_len() {
  case "$1" in
    fuzz_gguf) echo 65536 ;;
    fuzz_jinja) echo 8192 ;;
    fuzz_tokenizer) echo 2048 ;;
    fuzz_http_request | fuzz_openai_request | fuzz_grammar) echo 4096 ;;
    *) echo 16384 ;;
  esac
}

# ---- run --------------------------------------------------------------------------------------
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
LOGS="$BUILD/logs"
ARTIFACTS="$BUILD/artifacts"
mkdir -p "$LOGS" "$ARTIFACTS"
targets=()
for src in tools/dev/fuzz/fuzz_*.cpp; do
  name=$(basename "$src" .cpp)
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  targets+=("$name")
done

# One target: runs it and writes its table row to $ROWS/<target> (exit status 1 when it failed).
ROWS="$BUILD/rows"
rm -rf "$ROWS" && mkdir -p "$ROWS"
run_target() {
  local t=$1 bin="$BUILD/fuzz/$1"
  if [ ! -x "$bin" ]; then
    echo "| $t | - | - | - | not built |" >"$ROWS/$t"
    return 1
  fi
  mkdir -p "$CORPUS/$t" "$ARTIFACTS/$t"
  local dict=()
  [ -f "tools/dev/fuzz/$t.dict" ] && dict=("-dict=tools/dev/fuzz/$t.dict")
  echo "fuzz: $t for ${SECONDS_PER_TARGET} s"
  local rc=0
  # max_total_time ends the run; `timeout` is the backstop should one input hang past -timeout.
  timeout --kill-after=30 $(( SECONDS_PER_TARGET + 120 )) "$bin" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" \
    -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/$t/" "$CORPUS/$t" >"$LOGS/$t.log" 2>&1 || rc=$?
  local execs stats cov ft result="ok"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$LOGS/$t.log" | tail -1 | awk '{print $2}' || true)
  stats=$(grep -E '^#[0-9]+' "$LOGS/$t.log" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -1 || true)
  cov=$(echo "$stats" | awk '{print $2}')
  ft=$(echo "$stats" | awk '{print $4}')
  if [ "$rc" -ne 0 ]; then
    local repro
    repro=$(grep -o 'Test unit written to [^ ]*' "$LOGS/$t.log" | tail -1 | sed 's/Test unit written to //' || true)
    result="FAILED (exit $rc; log $LOGS/$t.log; reproducer ${repro:-none})"
    grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written' "$LOGS/$t.log" | head -20 >&2 || true
  fi
  echo "| $t | ${execs:-?} | ${cov:-?} | ${ft:-?} | $result |" >"$ROWS/$t"
  [ "$result" = ok ]
}

# FUZZ_PARALLEL targets at a time (default: one per core), each single-threaded.
PARALLEL="${FUZZ_PARALLEL:-$(nproc)}"
failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
rows=()
for t in "${targets[@]}"; do rows+=("$(cat "$ROWS/$t")"); done

echo
echo "| target | executions | cov | ft | result |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
n_failed=$(printf '%s\n' "${rows[@]}" | grep -c -v '| ok |$' || true)
echo "fuzz: $(( ${#targets[@]} - n_failed )) passed, $n_failed failed"
exit "$failed"
