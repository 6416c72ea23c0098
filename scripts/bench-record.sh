#!/usr/bin/env bash
# Measures the figures we track and files them under bench/: the BitNet b1.58 2B-4T-shaped
# model (generated, seed 1), pp512 and tg128, 1 and 2 threads, with the 8-bit head and the
# file's own F16 head, the read-bandwidth bound measured in the same run.
#
#   scripts/bench-record.sh [extra bench flags]
#
# Writes bench/YYYY-MM-DD-COMMIT.json (the full report) and bench/YYYY-MM-DD-COMMIT.md (the
# table and the exact command). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
cargo build --release -j "$jobs" -p bitnet-cli
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
model=models/2b4t-i2_s.gguf
mkdir -p models bench
[ -f "$model" ] || "$bin" gen-model --preset 2b-4t --seed 1 -o "$model"

commit=$(git rev-parse --short HEAD)
stamp="$(date -u +%F)-$commit"
for head in q8 native; do
  cmd=("$bin" bench -m "$model" -p 512 -n 128 -t 1,2 -r 3 --warmup 1 --head "$head" "$@")
  "${cmd[@]}" --json-report "bench/$stamp-head-$head.json" > "bench/$stamp-head-$head.md"
  {
    echo
    echo "command: \`${cmd[*]}\`"
    echo "date: $(date -u +%FT%TZ), commit: $commit, cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  } >> "bench/$stamp-head-$head.md"
  cat "bench/$stamp-head-$head.md"
done
