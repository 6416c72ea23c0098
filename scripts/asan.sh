#!/usr/bin/env bash
# The unsafe code under AddressSanitizer (x86-64 Linux): every load and store our crates make
# (the SIMD kernels' vector loads included) is checked against the live allocations, so a
# kernel tail that reads a vector past its slice, a use after free or a stack overrun aborts
# the test with a report instead of reading a neighbour's bytes; LeakSanitizer then reports
# what a test binary leaked. It runs:
#   - bitnet-kernels: the lib's tests and every test in tests/ (each kernel against the scalar
#     reference for every set this CPU has: scalar, AVX2, AVX-VNNI and AVX-512 on a Zen 4/5 or
#     a Sapphire Rapids; the sets valgrind cannot run, scripts/memcheck.sh);
#   - bitnet-core: the lib's tests, and engine (the forward pass on synthetic models of every
#     weight type, 1 to 3 threads, mmap and read loading, the chunked prefill), threadpool
#     (the pool, its disjoint slices and chunk queue, the 14000-region stress test), tokenizer
#     (the real vocabularies of the test data, mapped), kv_types (every KV cache format through
#     the engine), kv_snapshot (saved KV files read back), weight_read (the shipped model read in
#     place), golden_engine (the golden models with every kernel set) and batch_engine (the
#     paged KV cache: batches, forks, copy on write, the prefix cache). kv_rotate of both crates
#     comes along (a `--test` name selects it in both). The rest of bitnet-core's tests (the
#     scheduler, sampling, chat templates, structured output) are safe code over these.
# How: the stable toolchain, with RUSTC_BOOTSTRAP=1 for -Zsanitizer=address; std is not
# rebuilt (no -Zbuild-std, no nightly). rustc (1.95) lets instrumented crates link against the
# uninstrumented std without -Cunsafe-allow-abi-mismatch=sanitizer: AddressSanitizer is not a
# "target modifier" (rust-lang/rust#138736 made the other sanitizers ones). This script is also
# the rustc wrapper cargo calls: only this workspace's crates, built for --target, get the
# flag; the dependencies, build scripts and proc-macros are compiled as they are (15% less
# CPU time cold; they are not what this pass proves). ASan's allocator replaces
# malloc for the whole process, so a read past a buffer a dependency or std allocated is
# caught in our code all the same. Its own target directory (`asan/` under the target
# directory): sharing the normal one would evict the normal build.
# Time on 2 cores: about 5.5 min cold (4 of them the dependencies), 1 min warm (running the
# tests: bitnet-core's lib tests and golden_engine's scalar reference are the long ones).
# A self-check, by hand: a test reading one byte past a Vec fails the pass with a
# heap-buffer-overflow report; one leaking a Box fails it with a LeakSanitizer report.
# scripts/test.sh runs it; scripts/memcheck.sh is its other half (valgrind: uninitialised
# reads, which ASan does not see, and the AVX2 tile kernel's inline asm, which it does not
# instrument).
set -euo pipefail
# Run by cargo as the rustc wrapper (below): our crates are compiled with the sanitizer, the
# dependencies and everything built for the host (build scripts, proc-macros: no --target)
# as they are.
if [ -n "${BITNET_ASAN_ROOT:-}" ]; then
  rustc="$1"
  shift
  case " $* " in
  *" --target "*)
    case "${CARGO_MANIFEST_DIR:-}/" in
    "$BITNET_ASAN_ROOT"/*) exec "$rustc" "$@" -Zsanitizer=address ;;
    esac
    ;;
  esac
  exec "$rustc" "$@"
fi
cd "$(dirname "$0")/.."
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "== ASan pass skipped: it runs on x86-64 Linux only" >&2
  exit 0
fi
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
target=x86_64-unknown-linux-gnu
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
# The test data, unpacked by the normal build (a no-op after scripts/test.sh); instrumented,
# each test binary would otherwise unpack it again, under ASan, into the ASan target folder.
BITNET_TESTDATA="${BITNET_TESTDATA:-$(cargo run -q -j "$jobs" -p bitnet-testdata)}"
export BITNET_TESTDATA
# Its own folder: the flags rebuild every crate, and would otherwise evict the normal build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/asan"
export CARGO_INCREMENTAL=0
export RUSTC_BOOTSTRAP=1
export BITNET_ASAN_ROOT="$PWD"
export RUSTC_WRAPPER="$PWD/scripts/asan.sh"
# Leaks are reported too (LeakSanitizer runs at each test binary's exit); halt on the first
# error, with its report, whatever the test harness does with a panic.
export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_stack_use_after_return=1}"

core_tests=(engine threadpool tokenizer kv_types kv_snapshot weight_read golden_engine batch_engine)
kernel_names=$(cd bitnet-kernels/tests && ls -- *.rs | sed 's/\.rs$//')
test_args=()
for t in $kernel_names "${core_tests[@]}"; do test_args+=(--test "$t"); done
step "ASan build: bitnet-kernels (lib and tests), bitnet-core (lib, ${core_tests[*]})"
# One cargo invocation, so features resolve once (two would compile the kernels twice).
built="$(
  cargo test --no-run -q -j "$jobs" --target "$target" --message-format=json \
    -p bitnet-kernels -p bitnet-core --lib "${test_args[@]}" |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-message" and m["message"]["level"] == "error":
        sys.stderr.write(m["message"]["rendered"])
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["manifest_path"], m["target"]["src_path"], m["executable"])'
)"
[ "$(echo "$built" | wc -l)" -ge "$(($(echo "$kernel_names" | wc -w) + ${#core_tests[@]} + 2))" ] ||
  { echo "error: the ASan test binaries were not all built" >&2; exit 1; }
failed=()
while read -r manifest src exe; do
  name="$(basename "$(dirname "$manifest")")/${src#"$(dirname "$manifest")"/}"
  step "ASan: $name"
  (cd "$(dirname "$manifest")" && "$exe" -q) || failed+=("$name")
done <<<"$built"
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: ASan pass failed: ${failed[*]}" >&2
  exit 1
fi
