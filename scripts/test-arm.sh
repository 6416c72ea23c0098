#!/usr/bin/env bash
# The AArch64 pass of the test suite, on an x86-64 Linux machine: cross-build for
# aarch64-unknown-linux-gnu and run under qemu's user-mode emulator (10-50x slower than native,
# so only what proves the ARM kernels runs here):
#   1. the kernel tests (every SIMD set against the scalar reference), once per emulated CPU:
#      `max` (NEON + dotprod + i8mm: all three sets are tested in that one run),
#      `cortex-a76` (the Raspberry Pi 5's core: NEON + dotprod) and `cortex-a57` (NEON only),
#      each checked to offer exactly the sets named (a lost set fails, it is not skipped);
#   2. the golden logits (bitnet.cpp's and llama.cpp's, testdata/golden), prefill and
#      decode, with NEON (what every ARM64 CPU has) and i8mm (the most intricate set);
#      dotprod is checked against the scalar reference in 1. and end to end in 3.
#      (BITNET_ARM_GOLDEN_SETS=neon,dotprod,i8mm for all three: 100 s a set.) The scalar
#      reference is left to the x86 pass: it is the same portable code, and the slow part
#      under emulation;
#   3. the shipped model: the README's text and greedy text byte for byte as this machine's own
#      build writes them, and the held-out perplexity of the first windows within 0.2% of this
#      machine's (the float kernels sum in another order, and this relu2 model amplifies a
#      last-bit difference: the x86 sets differ from each other in the 4th digit too; the full
#      text takes minutes a set under emulation), with each ARM set;
#   4. `cargo check` for aarch64-apple-darwin (macOS; nothing there can run it here);
#   5. the thread pool on 2 and 4 threads: bitnet-core's pool tests (among them a stress test of
#      14000 fork-joins that aborts with a message if a region stalls) and the shipped model's
#      README sample and greedy text with -t 2 and -t 4, byte for byte as in 3.
# The jobs of 1.-3. run one thread: they prove the kernels, and 5. proves the pool. qemu-user
# (7.2, x86-64 host) lets an AArch64 store-release be passed by a later load-acquire (STLR then
# LDAR: a SeqCst store then load), which ARMv8 forbids; the pool's handshakes once relied on that
# order and hung here with every thread asleep. They now put a SeqCst fence (DMB, which qemu
# keeps) between the store and the load (bench/2026-12-06-pool-loom-arm.md; scripts/loom.sh
# model-checks them). Each emulated command also has a time limit, so a hang fails the pass.
# So the builds come first (they use every core), then the emulated runs and the macOS check
# run side by side, as many at once as there are cores (JOBS), each job's output printed
# whole when it ends.
# On an ARM machine none of this is needed: `scripts/test.sh` tests the sets the CPU has.
# scripts/setup-arm.sh installs what is missing (rustup target, cross gcc, qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

./scripts/setup-arm.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
emulate() { timeout 900 qemu-aarch64 -L "$sysroot" "$@"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

step "ARM builds: kernel tests, golden logits and pool tests, bitnet"
# Everything in ONE cargo invocation: the kernel tests (every integration test of
# bitnet-kernels, by name), the golden logits and thread pool tests of bitnet-core and,
# through one test of bitnet-cli, the `bitnet` binary. Separate invocations resolved features
# three ways and compiled bitnet-kernels (at opt-level 3) three times, bitnet-core, serde, syn
# and a dozen more twice or three times, for this target alone. The unit tests inside the libraries'
# sources are left to the x86 pass (platform-independent code; the check that the emulated
# CPU offers the expected sets is an integration test, tests/isa.rs).
kernel_names=$(cd bitnet-kernels/tests && ls -- *.rs | sed 's/\.rs$//')
test_args=()
for t in $kernel_names; do test_args+=(--test "$t"); done
built="$(
  cargo test --no-run -q -j "$jobs" --target "$target" --message-format=json \
    -p bitnet-kernels -p bitnet-core -p bitnet-cli "${test_args[@]}" --test golden_engine \
    --test threadpool --test cli |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["src_path"], m["executable"])'
)"
# By source path: bitnet-core has tests of the same names (kv_rotate).
kernel_tests=$(echo "$built" | awk '$1 ~ /\/bitnet-kernels\/tests\/[^\/]*\.rs$/ { print $2 }')
golden_test=$(echo "$built" | awk '$1 ~ /\/bitnet-core\/tests\/golden_engine\.rs$/ { print $2 }')
pool_test=$(echo "$built" | awk '$1 ~ /\/bitnet-core\/tests\/threadpool\.rs$/ { print $2 }')
[ "$(echo "$kernel_tests" | wc -w)" = "$(echo "$kernel_names" | wc -w)" ] &&
  [ -n "$golden_test" ] && [ -n "$pool_test" ] ||
  { echo "error: the aarch64 tests were not all built" >&2; exit 1; }
arm_bitnet="${CARGO_TARGET_DIR:-target}/$target/debug/bitnet"
# scripts/test.sh passes the binary its tests built (a plain `cargo build -p bitnet-cli`
# would resolve features anew and rebuild much of the tree).
host_bitnet="${BITNET_BIN:-}"
if [ -z "$host_bitnet" ]; then
  cargo build -q -j "$jobs" -p bitnet-cli
  host_bitnet="${CARGO_TARGET_DIR:-target}/debug/bitnet"
fi
# The test data, unpacked natively before the emulated golden jobs read it (each would
# otherwise decompress it under the emulator, for minutes); a no-op after scripts/test.sh.
BITNET_TESTDATA="$(cargo run -q -j "$jobs" -p bitnet-testdata)"
export BITNET_TESTDATA

# 1. The kernel tests (every set against the scalar reference) on an emulated CPU, in the
# package's directory as `cargo test` runs them; the CPU must offer exactly these sets.
kernel_job() { # CPU SETS
  local exe
  for exe in $kernel_tests; do
    (cd bitnet-kernels && BITNET_EXPECT_KERNELS="$2" emulate -cpu "$1" "$exe") || return 1
  done
}

# 2. The golden logits with one kernel set.
golden_job() { # SET
  (cd bitnet-core && BITNET_TEST_KERNELS="$1" BITNET_TEST_THREADS=1 emulate -cpu max "$golden_test")
}

# 3. The shipped model: the README's sample, greedy text and perplexity of one ARM set against
# this machine's.
model=models/shakespeare.gguf
heldout=models/shakespeare-ref/heldout.txt
# The README's sample, the lines between its command and the end of the block.
awk '/^\$ bitnet generate -m models\/shakespeare.gguf -p "ROMEO:" -n 80 -s 1$/{on=1; next}
     on && /^```/{exit} on' README.md >"$tmp/readme.txt"
[ -s "$tmp/readme.txt" ] || { echo "error: README sample not found" >&2; exit 1; }
outputs_of() { # OUT COMMAND...: the three outputs compared: sampled text, greedy text, perplexity
  local out="$1"
  shift
  "$@" generate -t 1 -m "$model" -p "ROMEO:" -n 80 -s 1 2>/dev/null >"$out.sampled"
  "$@" generate -t 1 -m "$model" -p "ROMEO:" -n 80 --temp 0 2>/dev/null >"$out.greedy"
  "$@" perplexity -t 1 -m "$model" -f "$heldout" -c 256 --chunks 6 2>&1 |
    sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' >"$out.ppl"
}
shipped_job() { # SET
  local isa="$1" out="$tmp/$1" kind
  BITNET_KERNEL=$isa outputs_of "$out" emulate -cpu max "$arm_bitnet"
  for kind in sampled greedy; do
    if ! cmp -s "$tmp/host.$kind" "$out.$kind"; then
      echo "error: $isa ($kind) differs from this machine's output:"
      diff "$tmp/host.$kind" "$out.$kind" || true
      return 1
    fi
  done
  head -c "$(wc -c <"$tmp/readme.txt")" "$out.sampled" | cmp -s - "$tmp/readme.txt" || {
    echo "error: $isa does not write the README's sample"
    return 1
  }
  awk -v a="$(cat "$tmp/host.ppl")" -v b="$(cat "$out.ppl")" \
    'BEGIN { d = (a - b) / a; if (a == "" || b == "" || d > 0.002 || d < -0.002) exit 1 }' || {
    echo "error: $isa perplexity $(cat "$out.ppl") is not within 0.2% of $(cat "$tmp/host.ppl")"
    return 1
  }
  echo "$isa: README sample and greedy text identical; perplexity $(cat "$out.ppl")"
}

# 5. The pool on several threads (the jobs above run one): its tests, the stress test's figures
# printed, then the shipped model's two texts with 2 and 4 threads against this machine's
# single-threaded ones (this machine writes the same text with 1, 2 and 4 threads).
pool_job() {
  (cd bitnet-core && emulate -cpu max "$pool_test" --skip stress_fork_join_runs_every_part_once &&
    emulate -cpu max "$pool_test" --exact stress_fork_join_runs_every_part_once --nocapture) ||
    return 1
  local threads out kind
  for threads in 2 4; do
    out="$tmp/threads-$threads"
    emulate -cpu max "$arm_bitnet" generate -t "$threads" -m "$model" -p "ROMEO:" -n 80 -s 1 \
      2>/dev/null >"$out.sampled"
    emulate -cpu max "$arm_bitnet" generate -t "$threads" -m "$model" -p "ROMEO:" -n 80 --temp 0 \
      2>/dev/null >"$out.greedy"
    for kind in sampled greedy; do
      if ! cmp -s "$tmp/host.$kind" "$out.$kind"; then
        echo "error: -t $threads ($kind) differs from this machine's single-threaded output:"
        diff "$tmp/host.$kind" "$out.$kind" || true
        return 1
      fi
    done
    echo "-t $threads: README sample and greedy text identical"
  done
}

# 4. macOS: nothing here can run it, so it is compiled only. It is the longest job (a check
# of the whole dependency tree for another target): it starts first, with every core cargo
# can have (the emulated jobs beside it are single-threaded, but for the pool's few seconds).
apple_job() { cargo check -q -j "$jobs" --workspace --target aarch64-apple-darwin; }

outputs_of "$tmp/host" "$host_bitnet"
echo "-- this machine ($(uname -m)): perplexity of the first 6 windows $(cat "$tmp/host.ppl")"

# The jobs, longest first, at most $jobs at once; each one's output is printed when it ends.
golden_sets="${BITNET_ARM_GOLDEN_SETS:-neon,i8mm}"
job_names=()
launch() { # NAME COMMAND...
  local name="$1"
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  job_names+=("$name")
  (
    start=$SECONDS
    if "$@" >"$tmp/job-$name.log" 2>&1; then rc=0; else rc=$?; fi
    echo "$rc" >"$tmp/job-$name.rc"
    echo "-- [$((SECONDS - start))s] $name: $([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
    cat "$tmp/job-$name.log"
  ) &
}
step "ARM runs: kernels on 3 CPUs, golden logits ($golden_sets), shipped model, pool, macOS check"
launch apple-check apple_job
for set in ${golden_sets//,/ }; do launch "golden-$set" golden_job "$set"; done
for isa in neon dotprod i8mm; do launch "shipped-$isa" shipped_job "$isa"; done
launch pool-threads pool_job
# `max`: NEON + dotprod + i8mm (all three sets tested in that one run); `cortex-a76`: the
# Raspberry Pi 5's core (NEON + dotprod); `cortex-a57`: NEON only.
launch kernels-max kernel_job max scalar,neon,dotprod,i8mm
launch kernels-cortex-a76 kernel_job cortex-a76 scalar,neon,dotprod
launch kernels-cortex-a57 kernel_job cortex-a57 scalar,neon
wait
failed=()
for name in "${job_names[@]}"; do
  [ "$(cat "$tmp/job-$name.rc" 2>/dev/null)" = 0 ] || failed+=("$name")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: ARM pass failed: ${failed[*]}" >&2
  exit 1
fi
echo "== ARM pass: ok"
