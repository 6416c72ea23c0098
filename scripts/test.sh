#!/usr/bin/env bash
# The test suite, as CI runs it: first the test data unpacked (testdata/*.tar.xz into the
# target folder, `cargo run -p bitnet-testdata`; tests would do it on first use, this does it
# once, up front, for the scripts too), the import-circle check (scripts/module-cycles.py
# and its self-test; a second), then everything with the best kernels this CPU has, then the
# suite again (doc examples aside) with the scalar kernels forced, so the fallbacks stay
# honest; and the
# embedding examples of bitnet-core run on the shipped model (they exit non-zero when they
# fail), the server's fault drill (python3) and the chat page's test in headless Chromium
# (scripts/browser-test.sh installs Debian's chromium and chromium-driver where missing),
# every command README.md and docs/ show (scripts/doc-commands.py), the thread pool's loom
# model check (scripts/loom.sh), the unsafe code under AddressSanitizer (scripts/asan.sh: the
# kernel tests with every set this CPU has, the engine, pool, mmap loader and tokenizer tests)
# and under valgrind's memcheck (scripts/memcheck.sh: the kernel tests' scalar and AVX2 sets,
# with the binaries the first pass built), a short run of every fuzz target (scripts/fuzz-ci.sh);
# then, on an x86-64 Linux machine, the AArch64 pass under emulation
# (scripts/test-arm.sh: the ARM kernel sets against the reference, the golden logits, the
# shipped model's text; it installs the cross tools it needs) and the Windows pass under wine
# (scripts/test-windows.sh: the x86-64 Windows build's kernel tests, golden logits, shipped
# model's text, converter and server; it installs MinGW-w64 and wine). The test data and
# what each file is: testdata/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
# A one-shot build gains nothing from incremental caches: they cost 2 GB and time to write.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Each step's time, so a slow CI shows where it went.
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
step "test data"
BITNET_TESTDATA="$(cargo run -q -j "$jobs" -p bitnet-testdata)"
export BITNET_TESTDATA
# No file-level import circle bigger than a file and its own error type. The checker's
# self-test runs first, so a checker that finds nothing cannot pass the workspace.
step "import circles"
./scripts/module-cycles-test.sh
python3 scripts/module-cycles.py
step "workspace tests, best kernels"
cargo test --workspace -j "$jobs"
# The server's fault drill (half-open sockets, slow senders, SIGTERM under load, kill -9 and
# restart): exits non-zero on a lost or mislabelled answer.
step "serve fault drill"
# The binary the tests above built: `cargo build -p bitnet-cli` would resolve features anew.
export BITNET_BIN="${CARGO_TARGET_DIR:-target}/debug/bitnet"
JOBS="$jobs" ./scripts/serve-faults.sh
# The chat page in headless Chromium (installed by scripts/setup-browser.sh where missing):
# streaming, stop, reload, switching conversations, XSS payloads, the API key, screenshots.
step "browser test"
./scripts/browser-test.sh
# Every command README.md and docs/ show, run as a reader would type it (the cheap ones; the
# script says which it lists instead, and why), with the binaries the tests built.
step "commands of the README and docs/"
cargo build -q -j "$jobs" --workspace --bins
python3 scripts/doc-commands.py --bin-dir "${CARGO_TARGET_DIR:-target}/debug"
# The examples `cargo test --workspace` built (a `cargo run -p bitnet-core --example` would
# resolve features anew and rebuild for minutes); this build only links their names.
cargo build -q -j "$jobs" --workspace --examples
for example in generate chat serve_threads; do
  step "example $example on models/shakespeare.gguf"
  "${CARGO_TARGET_DIR:-target}/debug/examples/$example" models/shakespeare.gguf
done
# The Python package (python/, a cargo workspace of its own): its release wheel built once
# into a virtual environment (maturin, pytest and openai from PyPI on first use), then its
# tests against the shipped model and the CLI the tests above built.
step "Python package"
BITNET_BIN="${CARGO_TARGET_DIR:-target}/debug/bitnet" JOBS="$jobs" ./python/test.sh
# The thread pool's sleep/wake and done handshakes model-checked with loom (every interleaving
# of a caller and one or two workers, up to 3 preemptions): scripts/loom.sh.
step "thread pool model check (loom)"
JOBS="$jobs" ./scripts/loom.sh
# Reads past a buffer, use after free, leaks: the kernel tests (every set this CPU has) and
# bitnet-core's engine, pool, loader and tokenizer tests built with AddressSanitizer, in
# target/asan (about 5.5 min cold on 2 cores, 1 min warm): scripts/asan.sh.
step "unsafe code under AddressSanitizer"
JOBS="$jobs" ./scripts/asan.sh
# Uninitialised reads (and what ASan cannot see: inline asm): the kernel tests, scalar and AVX2
# (what valgrind emulates), the pool, the in-place weight read and one engine test under
# valgrind's memcheck, with the test binaries the first pass built (about 40 s):
# scripts/memcheck.sh.
step "unsafe code under valgrind memcheck"
JOBS="$jobs" ./scripts/memcheck.sh
# Every fuzz target (the GGUF parser, the tokenizer, GBNF, JSON Schema, chat templates, saved
# KV files, the server's request bodies, the converter's inputs) for 20 s from its seeds under
# AddressSanitizer (about 4 min cold to build, 1.5 min to run): scripts/fuzz-ci.sh.
step "fuzz targets, short runs"
JOBS="$jobs" ./scripts/fuzz-ci.sh
# The scalar kernels again, without the doc examples (they do not depend on the set). The
# same package selection as the first pass: a narrower one would resolve features anew and
# rebuild half the dependency tree.
step "workspace tests, scalar kernels forced"
BITNET_KERNEL=scalar cargo test --workspace -j "$jobs" --lib --bins --tests
if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
  if [ "${BITNET_SKIP_ARM:-0}" = 1 ]; then
    echo "== ARM pass SKIPPED (BITNET_SKIP_ARM=1): the ARM kernels were not tested" >&2
  else
    step "ARM pass"
    JOBS="$jobs" ./scripts/test-arm.sh
  fi
  if [ "${BITNET_SKIP_WINDOWS:-0}" = 1 ]; then
    echo "== Windows pass SKIPPED (BITNET_SKIP_WINDOWS=1): the Windows build was not tested" >&2
  else
    step "Windows pass"
    JOBS="$jobs" ./scripts/test-windows.sh
  fi
fi
step "done"
