#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run the CUDA checks without building there: the real
# (not emulated) CUDA build's CLI and test binaries with its CTest files, and a subset of the test
# data, into .dev/gpu/ (ignored by git), small enough to travel with the working tree. On the GPU
# machine `tools/dev/gpu_suite.sh --prebuilt .dev/gpu` unpacks them where they were built and
# runs the suite without its build step (docs/CUDA.md).
#
#   tools/dev/gpu_pack.sh [BUILD_DIR]     BUILD_DIR defaults to build
# Environment: KESTREL_TESTDATA [../shared/testdata]; GPU_PACK_MAX_MB [60]: the most the two
# archives may weigh together (the device tool carries at most 64 MiB with the source).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
BUILD=$(cd "$BUILD" && pwd)
TESTDATA=${KESTREL_TESTDATA:-$ROOT/../shared/testdata}
OUTDIR=$ROOT/.dev/gpu
MAX_MB=${GPU_PACK_MAX_MB:-60}

if ! grep -q '^KESTREL_CUDA_EMULATE:BOOL=OFF' "$BUILD/CMakeCache.txt" 2>/dev/null ||
  ! grep -q '^CMAKE_CUDA_FLAGS:' "$BUILD/CMakeCache.txt"; then
  echo "gpu_pack: $BUILD is not a real CUDA build (KESTREL_CUDA=ON, not emulated)" >&2
  exit 2
fi
[[ -d $TESTDATA/models ]] || { echo "gpu_pack: no test data at $TESTDATA" >&2; exit 2; }
grep -qx '/.dev/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.dev/' >>"$ROOT/.git/info/exclude"
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/*.tar.xz

# The binaries the cuda-labelled tests run, the CLI, and every CTestTestfile.cmake (their paths are
# absolute: the suite unpacks the build at the same path).
cd "$BUILD"
files=(kestrel)
while read -r f; do files+=("$f"); done < <(ctest -N -V -L cuda 2>/dev/null | sed -n 's|^.*Test command: *\([^ ]*\).*$|\1|p' |
  sed "s|^$BUILD/||" | sort -u)
while read -r f; do files+=("$f"); done < <(find . -name CTestTestfile.cmake | sed 's|^\./||')
for f in "${files[@]}"; do [[ -e $f ]] || { echo "gpu_pack: $BUILD/$f is missing (build first)" >&2; exit 2; }; done
tar cf - "${files[@]}" | xz -T0 -6 >"$OUTDIR/build.tar.xz"
echo "$BUILD" >"$OUTDIR/build_path"

# Test data: references and READMEs whole; then the models but the F32 ones (the largest; the
# test that parses every shipped file keys on stories260K-f32 and skips without it), smallest
# first while the total stays under the limit.
cd "$TESTDATA/.."
budget=$(( MAX_MB * 1000000 - $(stat -c %s "$OUTDIR/build.tar.xz") ))
td=(testdata/README.md testdata/reference testdata/models/README.md testdata/tokenizer/ggml-vocab-llama-spm.gguf)
used=$(du -cb "${td[@]}" | tail -n 1 | cut -f 1)
while read -r size f; do
  # Random weights barely compress: count a model at 90% of its size.
  if (( used + size * 9 / 10 < budget )); then td+=("$f"); used=$(( used + size * 9 / 10 )); else echo "left out: $f"; fi
done < <(find testdata/models -name '*.gguf' ! -name '*-f32.gguf' -printf '%s %p\n' | sort -n)
tar cf - "${td[@]}" | xz -T0 -6 >"$OUTDIR/testdata.tar.xz"

total=$(du -cb "$OUTDIR"/*.tar.xz | tail -n 1 | cut -f 1)
echo "gpu_pack: $OUTDIR holds $(( total / 1000000 )) MB (build $BUILD, test data from $TESTDATA)"
(( total <= MAX_MB * 1000000 )) || { echo "gpu_pack: over GPU_PACK_MAX_MB=$MAX_MB" >&2; exit 1; }
echo "on the GPU machine (carry .dev): bash tools/dev/gpu_suite.sh --prebuilt .dev/gpu"
