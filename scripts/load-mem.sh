#!/usr/bin/env bash
# Load time and peak memory of the BitNet b1.58 2B-4T-shaped model (generated, seed 1; issue
# 14's targets on the 2-core AVX2 machine):
#
# - warm load: the file is read once into the page cache, then RUNS loads per case
#   (`generate -n 1 -v`, the load's total), median and min; target LOAD_TARGET seconds
#   for the `--head q8` mapped case;
# - memory: a 16-token generation at -c CTX with --head q8, mapped and --no-mmap; its peak
#   RSS must stay within the weights in use + the KV cache + SLACK_MIB, all three as
#   `generate -v` reports them (`memory: weights in use X MiB ..., KV Y MiB, peak RSS Z MiB`).
#
#   scripts/load-mem.sh
#
# Prints markdown tables; exits non-zero if a memory check fails (and, with CHECK_TIME=1, if
# the median warm load misses LOAD_TARGET: timings depend on the machine and how busy it is,
# so by default they are only reported).
#
# Environment: MODEL (default models/2b4t-i2_s.gguf, generated if missing), RUNS (warm loads
# per case, default 7), THREADS (default 2), CTX (default 4096), SLACK_MIB (default 64),
# LOAD_TARGET (seconds, default 0.5), CHECK_TIME, JOBS (build jobs), NO_BUILD=1 (use the
# binary as built).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
runs="${RUNS:-7}"
threads="${THREADS:-2}"
ctx="${CTX:-4096}"
slack="${SLACK_MIB:-64}"
target="${LOAD_TARGET:-0.5}"
[ -n "${NO_BUILD:-}" ] || cargo build --release -j "$jobs" -p bitnet-cli >&2
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
model="${MODEL:-models/2b4t-i2_s.gguf}"
mkdir -p "$(dirname "$model")"
[ -f "$model" ] || "$bin" gen-model --preset 2b-4t --seed 1 -o "$model" >&2
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# Runs `generate` with the given flags; its stderr (the figures) is left in $err.
gen() {
  "$bin" generate -m "$model" -t "$threads" -v "$@" >/dev/null 2>"$err" || {
    cat "$err" >&2
    echo "bitnet generate $* failed" >&2
    exit 1
  }
}

# The number right after "$2" on the line of $err that starts with "$1" (e.g. "load " on
# the figures line, or "KV " on the memory line).
figure() {
  grep "^$1" "$err" | grep -o "$2[0-9][0-9.]*" | head -n 1 | sed "s/^$2//"
}

# Warm the page cache: read the file, then one load whose figures are dropped.
cat "$model" >/dev/null
gen -p hi -n 1 --head q8

echo "## Warm load: $model, $threads threads, $runs runs each"
echo
echo "| case | median s | min s | max s | target | result |"
echo "|---|---|---|---|---|---|"
time_fail=0
for flags in "--head q8" "--head native" "--head q8 --no-mmap"; do
  loads=()
  for _ in $(seq "$runs"); do
    # shellcheck disable=SC2086 # the flags are words
    gen -p hi -n 1 $flags
    loads+=("$(figure 'load phases: ' 'total ')")
  done
  read -r median min max < <(printf '%s\n' "${loads[@]}" | sort -g |
    awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
           printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }')
  result=-
  goal=-
  if [ "$flags" = "--head q8" ]; then
    goal="<= $target"
    if awk -v m="$median" -v t="$target" 'BEGIN { exit !(m <= t) }'; then
      result=PASS
    else
      result=SLOW
      time_fail=1
    fi
  fi
  echo "| \`$flags\` | $median | $min | $max | $goal | $result |"
done
# The steps of one more mapped --head q8 load, for where the time goes.
gen -p hi -n 1 --head q8
echo
grep -o 'load phases:.*' "$err" | sed 's/^/    /'
echo

echo "## Peak RSS: 16 tokens at -c $ctx, --head q8"
echo
echo "| mode | peak RSS MiB | weights in use MiB | KV MiB | limit MiB (+ $slack) | margin MiB | result |"
echo "|---|---|---|---|---|---|---|"
mem_fail=0
lines=()
for mode in mapped --no-mmap; do
  extra=()
  [ "$mode" = mapped ] || extra=(--no-mmap)
  gen -p "Once upon a time" -n 16 --ignore-eos -c "$ctx" --head q8 "${extra[@]}"
  weights=$(figure 'memory: ' 'weights in use ')
  kv=$(figure 'memory: ' 'KV ')
  peak=$(figure 'memory: ' 'peak RSS ')
  if [ -z "$weights" ] || [ -z "$kv" ] || [ -z "$peak" ]; then
    cat "$err" >&2
    echo "no memory figures in the output above" >&2
    exit 1
  fi
  read -r limit margin result < <(awk -v w="$weights" -v k="$kv" -v s="$slack" -v p="$peak" \
    'BEGIN { l = w + k + s; printf "%.1f %.1f %s\n", l, l - p, (p <= l) ? "PASS" : "FAIL" }')
  [ "$result" = PASS ] || mem_fail=1
  echo "| $mode | $peak | $weights | $kv | $limit | $margin | $result |"
  lines+=("$mode: $(grep -o 'memory:.*' "$err")")
done
echo
printf '    %s\n' "${lines[@]}"
echo
echo "date: $(date -u +%FT%TZ), commit: $(git rev-parse --short HEAD 2>/dev/null || echo -)," \
  "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
  "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "$mem_fail" -ne 0 ]; then
  echo "FAIL: peak RSS above the weights in use + KV + $slack MiB" >&2
  exit 1
fi
if [ -n "${CHECK_TIME:-}" ] && [ "$time_fail" -ne 0 ]; then
  echo "FAIL: median warm load above $target s" >&2
  exit 1
fi
