#!/usr/bin/env bash
# Build gpu_probe with nvcc and run it: tools/dev/gpu_probe/run_probe.sh [all|bw|launch|gemv|gemm]... [--quick]
# Needs an NVIDIA GPU, nvcc and cuBLASLt. ARCH picks the target (90a: H100/H200, 100a: B200, 120: RTX 50).
# Full log, build log (ptxas resource report), SASS load counts and nvidia-smi clock readings go to
# $OUT (default: /tmp/gpu_probe_out); the summary table is printed last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/gpu_probe_out}
arch=${ARCH:-90a}
build=${BUILD_DIR:-/tmp/gpu_probe_build}
mkdir -p "$out" "$build"

# Read-only readings of the card as found (clocks, power, throttle reasons). Nothing is changed.
{ nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE; } >"$out/nvidia-smi-before.txt" 2>&1

nvcc -O3 -std=c++17 -gencode "arch=compute_${arch},code=sm_${arch}" -Xptxas -v -o "$build/gpu_probe" \
  "$here/gpu_probe.cu" "$here/gemv.cu" "$here/gemm.cu" -lcublasLt >"$out/build.log" 2>&1 || {
  cat "$out/build.log"
  exit 1
}
# Are the weight loads 16 bytes wide? Count load instructions by width per kernel.
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$build/gpu_probe" | awk '/Function :/ {f = $3} /LDG|LDS/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^(LDG|LDS)/) { op = $i; break }
      n[f " " op]++ } END { for (k in n) print n[k], k }' | sort -k2 >"$out/sass_loads.txt"
fi

"$build/gpu_probe" "$@" 2>&1 | tee "$out/probe.log"
rc=${PIPESTATUS[0]}
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE >"$out/nvidia-smi-after.txt" 2>&1
exit "$rc"
