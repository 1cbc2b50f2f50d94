#!/usr/bin/env bash
# kestrel perf's predictions against kestrel bench's measurements on this machine (docs/PERF.md,
# "The performance model"). Per row: calibrate, predict, measure, within a minute or two (this
# machine's bandwidth drifts). Synthetic models are written to $DIR once and reused.
#   tools/dev/perf_validate.sh [BUILD_DIR] [DIR]     (defaults: build, /tmp)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
K=${1:-$ROOT/build}/kestrel
DIR=${2:-/tmp}
THREADS=${THREADS:-$(nproc)}
synth() {  # file preset args...
  local f=$DIR/$1
  shift
  [[ -s $f ]] || "$K" synth "$@" -o "$f" >&2
  echo "$f"
}
row() {  # file depth
  local m=$1 d=$2 pp=512
  [[ $d -gt 0 ]] && pp=0
  "$K" bench --calibrate -t "$THREADS" >/dev/null 2>&1
  local pred meas
  pred=$("$K" perf -m "$m" --hw local -t "$THREADS" --ctx $((d + 16)) -p 512 --json |
    python3 -c "import json,sys; j=json.load(sys.stdin); print('%.1f %.1f' % (j['prefill_tok_s'], j['decode_tok_s']))")
  meas=$("$K" bench -m "$m" -t "$THREADS" -p $pp -n 32 -r 2 --n-depth "$d" --json 2>/dev/null | python3 -c "
import json, sys
pp = tg = 0
for r in json.load(sys.stdin):
    if r['n_prompt'] == 512 and r['n_gen'] == 0: pp = r['avg_ts']
    if r['n_gen'] == 32: tg = r['avg_ts']
print('%.1f %.1f' % (pp, tg))")
  read -r ppp tgp <<<"$pred"
  read -r ppm tgm <<<"$meas"
  python3 -c "
e = lambda p, m: '%+.0f%%' % (100 * (p - m) / m) if m > 0 else ''
print('| %s | %s | %s | %s | %s | %s | %s | %s |' % ('$(basename "$m")', $d, $ppp if $ppm else '', $ppm or '', e($ppp, $ppm), $tgp, $tgm, e($tgp, $tgm)))"
}
echo "| model | context | pp512 predicted | measured | error | tg32 predicted | measured | error |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
row "$(synth l1b-q4_0.gguf llama-3.2-1b --type q4_0)" 0
row "$(synth l1b-q8_0.gguf llama-3.2-1b --type q8_0)" 0
row "$(synth l1b-q4_K.gguf llama-3.2-1b --type q4_K)" 0
row "$(synth q06-q8_0.gguf qwen3-0.6b --type q8_0)" 0
row "$(synth q30l4-q4_K.gguf qwen3-30b-a3b --type q4_K --layers 4)" 0
row "$(synth oss20l4-mxfp4.gguf gpt-oss-20b --type mxfp4 --layers 4)" 0
row "$DIR/l1b-q4_0.gguf" 1024
row "$DIR/q06-q8_0.gguf" 1024
