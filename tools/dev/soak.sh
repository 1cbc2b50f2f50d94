#!/usr/bin/env bash
# The soak of issue 18 (not in CI): `kestrel serve` under AddressSanitizer + UBSan, an hour of mixed
# load with random cancellations (tools/dev/soak_load.py), RSS and KV blocks sampled into a CSV;
# fails if RSS drifts or KV blocks leak, on any 5xx/malformed reply, crash, or leak report.
#
#   tools/dev/soak.sh [--minutes N | --seconds N] [--cli PATH] [--model PATH] [--clients N]
#                     [--parallel N] [--sample S] [--warmup S] [--max-rss-growth-mb MB] [--out DIR]
#
# Without --cli it configures and builds an ASan CLI in build-asan (as `make asan` does; only the
# kestrel_cli target). The model defaults to the qwen3 test model (byte-fallback vocabulary).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=3600 cli="" model="" out="${TMPDIR:-/tmp}/kestrel-soak-$(date +%Y%m%d-%H%M%S)" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --clients|--parallel|--sample|--warmup|--max-rss-growth-mb|--seed) extra+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "soak: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
done

if [ -z "$cli" ]; then
  build=${SOAK_BUILD:-build-asan}
  cmake -S . -B "$build" -G Ninja -DKESTREL_SANITIZE=ON -DKESTREL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target kestrel_cli -j "$(nproc)"
  cli="$build/kestrel"
fi
[ -x "$cli" ] || { echo "soak: no kestrel CLI at $cli" >&2; exit 2; }
testdata=${KESTREL_TESTDATA:-../shared/testdata}
model=${model:-$testdata/models/qwen3-f32.gguf}
[ -f "$model" ] || { echo "soak: no model at $model (--model PATH or KESTREL_TESTDATA)" >&2; exit 2; }

# A small ASan quarantine so that freed memory held for use-after-free checks does not read as
# growth; leaks are reported at exit (the server's exit code then fails the soak).
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$out"
python3 tools/dev/soak_load.py --cli "$cli" --model "$model" --seconds "$seconds" \
  --csv "$out/soak.csv" "${extra[@]}" 2>&1 | tee "$out/soak.log"
