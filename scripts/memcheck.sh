#!/usr/bin/env bash
# The unsafe code under valgrind's memcheck (x86-64 Linux): every instruction the tests run
# is checked for reads of uninitialised memory (a branch, an address or a system call
# depending on one), reads and writes outside a live allocation, and at exit for leaked
# blocks (definite leaks only). It sees what ASan (scripts/asan.sh) does not: uninitialised
# bytes (the `MaybeUninit` buffer the AVX2 tile kernels pack activations into), the inline
# asm of the AVX2 tile kernel, and std's own code.
# Valgrind decodes AVX2 but neither AVX-512 nor AVX-VNNI, and its emulated CPUID says so: under
# it the kernel tests, which test every set the CPU offers, run the scalar and AVX2 sets
# (checked: BITNET_EXPECT_KERNELS=scalar,avx2 makes tests/isa.rs fail on any other list; the
# wider sets are the ASan pass's). It runs, with the test binaries `cargo test --workspace`
# built (scripts/test.sh's first pass; the same selection, so nothing is compiled again):
#   - bitnet-kernels: the lib's tests and every test in tests/ (18 binaries, 135 tests);
#   - bitnet-core: threadpool (the pool, disjoint slices, chunk queue, the 14000-region stress
#     test: 1 s here, --fair-sched=yes hands the one running thread round fairly), weight_read
#     (the shipped model mapped and loaded with both heads on 1 to 3 threads, every weight
#     byte a decoded token streams read in place) and engine's
#     one_and_two_threads_and_load_modes_are_bit_identical (an I2_S synthetic model mapped and
#     read, prefill and decode on 1, 2 and 3 threads). The engine's other tests (2 min here, and
#     kv_types' 36 s) are left to ASan: the kernels they call are tested above.
# Time on 2 cores: about 40 s (two binaries at a time); nothing to build after the first
# pass (standalone, `cargo test --workspace --no-run` builds everything first).
# A self-check, by hand: a program branching on a byte of a fresh `Box::new_uninit` and reading
# one byte past a Vec gets "Conditional jump or move depends on uninitialised value(s)" and
# "Invalid read of size 1", and exit status 99.
# valgrind comes from apt where missing (scripts/apt-install.sh). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "== memcheck pass skipped: it runs on x86-64 Linux only" >&2
  exit 0
fi
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
command -v valgrind >/dev/null || ./scripts/apt-install.sh memcheck valgrind
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
# As scripts/test.sh builds: the incremental setting is part of what cargo compares.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
BITNET_TESTDATA="${BITNET_TESTDATA:-$(cargo run -q -j "$jobs" -p bitnet-testdata)}"
export BITNET_TESTDATA

# The test binaries `cargo test --workspace` built (scripts/test.sh's first pass): the same
# selection, so nothing is compiled anew; only their paths are asked for.
built="$(
  cargo test --workspace --no-run -q -j "$jobs" --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-message" and m["message"]["level"] == "error":
        sys.stderr.write(m["message"]["rendered"])
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["manifest_path"], m["target"]["src_path"], m["executable"])'
)"
# Every test of bitnet-kernels (lib and tests/); then bitnet-core's, named below.
runs=()
while read -r manifest src exe; do
  dir="$(dirname "$manifest")"
  case "$src" in
  */bitnet-kernels/src/lib.rs | */bitnet-kernels/tests/*.rs) runs+=("$dir $exe") ;;
  esac
done <<<"$built"
kernel_count=$(($(ls bitnet-kernels/tests/*.rs | wc -l) + 1))
[ "${#runs[@]}" = "$kernel_count" ] ||
  { echo "error: ${#runs[@]} kernel test binaries found, $kernel_count expected" >&2; exit 1; }
core_exe() {
  local exe
  exe=$(echo "$built" | awk -v s="/bitnet-core/tests/$1.rs" '$2 ~ s"$" { print $3 }')
  [ -n "$exe" ] || { echo "error: bitnet-core's test $1 was not built" >&2; exit 1; }
  echo "$exe"
}
pool_test=$(core_exe threadpool)
engine_test=$(core_exe engine)
weight_read_test=$(core_exe weight_read)
runs+=("bitnet-core $pool_test" "bitnet-core $weight_read_test")
# Of the engine's tests, the one loading a synthetic model mapped and read and running it on 1
# to 3 threads (3 s here; all 13 take 2 min, and their kernels are tested above).
runs+=("bitnet-core $engine_test --exact one_and_two_threads_and_load_modes_are_bit_identical")

# Valgrind emulates AVX2 but not AVX-512 nor AVX-VNNI: the CPU it shows offers exactly scalar
# and avx2 (tests/isa.rs checks that when BITNET_EXPECT_KERNELS is set), so every kernel test
# runs both. (The AVX-512 and AVX-VNNI sets are for the ASan pass, scripts/asan.sh.)
expect=scalar
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo &&
  expect=scalar,avx2
export BITNET_EXPECT_KERNELS="$expect"
vg=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
  --show-leak-kinds=definite --fair-sched=yes)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
step "memcheck: ${#runs[@]} test binaries, $jobs at a time, kernel sets $expect"
i=0
for run in "${runs[@]}"; do
  i=$((i + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  (
    read -r dir exe args <<<"$run"
    start=$SECONDS
    # shellcheck disable=SC2086 # args: the test filters, word-split on purpose
    if (cd "$dir" && "${vg[@]}" "$exe" -q $args) >"$tmp/$i.log" 2>&1; then rc=0; else rc=$?; fi
    echo "$rc" >"$tmp/$i.rc"
    echo "-- [$((SECONDS - start))s] $(basename "$dir")/$(basename "$exe"): $([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
    grep -v '^$' "$tmp/$i.log" | grep -v '^running \|^\.*$' || true
  ) &
done
wait
failed=0
for rc in "$tmp"/*.rc; do [ "$(cat "$rc")" = 0 ] || failed=$((failed + 1)); done
[ "$failed" = 0 ] || { echo "error: memcheck: $failed test binaries failed" >&2; exit 1; }
