#!/usr/bin/env bash
# A short, time-boxed run of every fuzz target (fuzz/, fuzz/README.md) as CI runs it: each
# target for FUZZ_SECONDS (20 by default) from its seeds, two at a time, under
# AddressSanitizer with debug assertions on. A crash, a sanitizer report, a timeout (10 s an
# input) or an out-of-memory (2 GiB) fails the pass and leaves the input in
# fuzz/artifacts/TARGET/ (the log names it); turn it into a regression test beside the code it
# broke. The long runs (30 minutes a target and more) are done by hand and recorded in bench/.
#
# No cargo-fuzz needed: the targets are built with cargo and the flags `cargo fuzz build -O`
# passes (sanitizer coverage, ASan, `--cfg fuzzing`, debug assertions, for --target so build
# scripts are left alone), except that the compiler may split a crate into several units
# (cargo-fuzz forces one for faster fuzzing; for 20 seconds a target the shorter build wins).
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take -Zsanitizer. Build in the target folder's
# `fuzz/` (about 4 min cold on 2 cores, seconds warm; the runs then take 4 x FUZZ_SECONDS). x86-64 Linux only (the sanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "== fuzz pass skipped: it runs on x86-64 Linux only" >&2
  exit 0
fi
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
seconds="${FUZZ_SECONDS:-20}"
root="$PWD"
target_root="${CARGO_TARGET_DIR:-$root/target}"
case "$target_root" in /*) ;; *) target_root="$root/$target_root" ;; esac
triple=x86_64-unknown-linux-gnu
fuzz_target_dir="$target_root/fuzz"
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth"
flags+=" --cfg fuzzing -Cdebug-assertions -Zsanitizer=address"

targets=(parse tokenize gbnf json_schema chat_template kv_snapshot request convert_config)
# Each target's longest input: the seeds must fit whole (a KV file, the shipped
# tokenizer.json, the GGUF seeds).
max_len() {
  case "$1" in
  kv_snapshot) echo 100000 ;;
  parse | convert_config) echo 65536 ;;
  *) echo 4096 ;;
  esac
}

step "fuzz targets: build"
(
  cd fuzz
  RUSTC_BOOTSTRAP=1 RUSTFLAGS="$flags" CARGO_TARGET_DIR="$fuzz_target_dir" \
    cargo build --release --target "$triple" -j "$jobs" -q \
    --config 'profile.release.debug="line-tables-only"' \
    $(printf -- '--bin %s ' "${targets[@]}")
)
bin="$fuzz_target_dir/$triple/release"

# Working corpora in a scratch folder: the run must not grow fuzz/corpus (a developer's
# long-run corpus) or leave files in the clone.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# `parse` starts from small versions of the test data's GGUFs (fuzz/README.md), made by the
# example the workspace build already compiled where there is one.
mkdir -p "$scratch/seeds-parse"
data="${BITNET_TESTDATA:-$(cargo run -q -j "$jobs" -p bitnet-testdata)}"
seeds_example="$target_root/debug/examples/fuzz_seeds"
if [ -x "$seeds_example" ]; then
  "$seeds_example" "$scratch/seeds-parse" "$data"/vocab/*.gguf "$data"/golden/gguf/*.gguf >/dev/null
else
  cargo run -q -j "$jobs" -p bitnet-gguf --example fuzz_seeds -- \
    "$scratch/seeds-parse" "$data"/vocab/*.gguf "$data"/golden/gguf/*.gguf >/dev/null
fi

run_one() {
  local t="$1" seeds="fuzz/seeds/$1"
  [ "$t" = parse ] && seeds="$scratch/seeds-parse"
  mkdir -p "$scratch/corpus-$t" "fuzz/artifacts/$t"
  if ! "$bin/$t" "$scratch/corpus-$t" "$seeds" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len="$(max_len "$t")" -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$t/" >"$scratch/$t.log" 2>&1; then
    echo "== fuzz target $t FAILED; its log:" >&2
    tail -n 60 "$scratch/$t.log" >&2
    return 1
  fi
  local runs
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$' || echo '?')"
  echo "   $t: ${seconds} s, $runs inputs, no finding"
}

step "fuzz targets: ${seconds} s each, ${jobs} at a time"
failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=("$!")
  names+=("$t")
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
if [ "$failed" != 0 ]; then
  echo "== fuzz pass FAILED (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
step "fuzz targets: every one clean"
