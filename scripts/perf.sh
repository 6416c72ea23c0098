#!/usr/bin/env bash
# Records where a generation run spends its time with `perf record` and prints the top symbols.
#
#   scripts/perf.sh [MODEL.gguf] [extra `bitnet generate` flags...]
#
# Needs Linux `perf` (Debian/Ubuntu: `apt-get install linux-perf`, or `linux-tools-$(uname -r)`),
# and permission to profile (`sysctl kernel.perf_event_paranoid=1` or run as root).
# Builds with the `profiling` cargo profile (release + line tables) and frame pointers so
# call graphs are cheap and accurate. Without a model argument it profiles the generated
# BitNet b1.58 2B-4T-shaped model (made once, 1.1 GiB, shared with scripts/bench-record.sh).
# On virtual machines without hardware counters it falls back to the cpu-clock software event.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"

command -v perf >/dev/null || { echo "perf not found: apt-get install linux-perf" >&2; exit 1; }
RUSTFLAGS="${RUSTFLAGS:-} -C force-frame-pointers=yes" \
  cargo build --profile profiling -j "$jobs" -p bitnet-cli
bin="${CARGO_TARGET_DIR:-target}/profiling/bitnet"

model="${1:-}"
[ $# -gt 0 ] && shift
if [ -z "$model" ]; then
  model=models/2b4t-i2_s.gguf
  mkdir -p models
  [ -f "$model" ] || "$bin" gen-model --preset 2b-4t --seed 1 -o "$model"
fi

event=cycles
perf stat -e cycles true >/dev/null 2>&1 && perf stat -e cycles true 2>&1 | grep -q "not supported" && event=cpu-clock
perf stat -e cycles true >/dev/null 2>&1 || event=cpu-clock

out=target/perf.data
perf record -e "$event" -F 2000 -g -o "$out" -- \
  "$bin" generate -m "$model" -p "The quick brown fox" -n 64 --greedy --no-echo "$@" >/dev/null
perf report -i "$out" --stdio --no-children -g none --sort symbol --percent-limit 0.5 2>/dev/null \
  | grep -v '^#' | grep -v '^$' | head -40
echo "full report: perf report -i $out"
