#!/usr/bin/env bash
# The AArch64 pass of the test suite, on an x86-64 Linux machine: cross-build for
# aarch64-unknown-linux-gnu and run under qemu's user-mode emulator (10-50x slower than native,
# so only what proves the ARM kernels runs here):
#   1. the kernel tests (every SIMD set against the scalar reference), once per emulated CPU:
#      `max` (NEON + dotprod + i8mm: all three sets are tested in that one run),
#      `cortex-a76` (the Raspberry Pi 5's core: NEON + dotprod) and `cortex-a57` (NEON only),
#      each checked to offer exactly the sets named (a lost set fails, it is not skipped);
#   2. the golden logits (bitnet.cpp's and llama.cpp's, ../shared/data/golden), prefill and
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
#   4. `cargo check` for aarch64-apple-darwin (macOS; nothing there can run it here).
# Everything emulated runs one thread: under qemu-user 7.2 a two-thread run once hung with every
# thread asleep in the pool's sleep/wake handshake (a SeqCst store-then-load on each side, which
# needs store-load ordering the emulator's x86 translation may not give); this pass proves the
# kernels, not the pool. Each emulated command also has a time limit, so a hang fails the pass.
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
runner() { echo "timeout 900 qemu-aarch64 -L $sysroot -cpu $1"; }
emulate() { timeout 600 qemu-aarch64 -L "$sysroot" "$@"; }

step "ARM 1/4: kernel tests under emulation"
for cpu_sets in max:scalar,neon,dotprod,i8mm cortex-a76:scalar,neon,dotprod cortex-a57:scalar,neon; do
  cpu="${cpu_sets%%:*}"
  sets="${cpu_sets#*:}"
  echo "-- qemu -cpu $cpu: kernel sets $sets"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner "$cpu")" BITNET_EXPECT_KERNELS="$sets" \
    cargo test -q -j "$jobs" -p bitnet-kernels --target "$target"
done

golden_sets="${BITNET_ARM_GOLDEN_SETS:-neon,i8mm}"
step "ARM 2/4: golden logits, kernel sets $golden_sets (qemu -cpu max)"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner max)" BITNET_TEST_KERNELS="$golden_sets" BITNET_TEST_THREADS=1 \
  cargo test -q -j "$jobs" -p bitnet-core --target "$target" --test golden_engine

step "ARM 3/4: the shipped model, emulated against this machine's build"
cargo build -q -j "$jobs" -p bitnet-cli --target "$target"
arm_bitnet="${CARGO_TARGET_DIR:-target}/$target/debug/bitnet"
# scripts/test.sh passes the binary its tests built (a plain `cargo build -p bitnet-cli`
# would resolve features anew and rebuild much of the tree).
host_bitnet="${BITNET_BIN:-}"
if [ -z "$host_bitnet" ]; then
  cargo build -q -j "$jobs" -p bitnet-cli
  host_bitnet="${CARGO_TARGET_DIR:-target}/debug/bitnet"
fi
model=models/shakespeare.gguf
heldout=models/shakespeare-ref/heldout.txt
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The README's sample, the lines between its command and the end of the block.
awk '/^\$ bitnet generate -m models\/shakespeare.gguf -p "ROMEO:" -n 80 -s 1$/{on=1; next}
     on && /^```/{exit} on' README.md >"$tmp/readme.txt"
[ -s "$tmp/readme.txt" ] || { echo "error: README sample not found" >&2; exit 1; }
outputs_of() { # the three outputs compared: sampled text, greedy text, perplexity
  "$@" generate -t 1 -m "$model" -p "ROMEO:" -n 80 -s 1 2>/dev/null >"$out.sampled"
  "$@" generate -t 1 -m "$model" -p "ROMEO:" -n 80 --temp 0 2>/dev/null >"$out.greedy"
  "$@" perplexity -t 1 -m "$model" -f "$heldout" -c 256 --chunks 6 2>&1 |
    sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' >"$out.ppl"
}
out="$tmp/host"
outputs_of "$host_bitnet"
echo "-- this machine ($(uname -m)): perplexity of the first 6 windows $(cat "$out.ppl")"
for isa in neon dotprod i8mm; do
  out="$tmp/$isa"
  BITNET_KERNEL=$isa outputs_of emulate -cpu max "$arm_bitnet"
  for kind in sampled greedy; do
    if ! cmp -s "$tmp/host.$kind" "$out.$kind"; then
      echo "error: $isa ($kind) differs from this machine's output:" >&2
      diff "$tmp/host.$kind" "$out.$kind" >&2 || true
      exit 1
    fi
  done
  head -c "$(wc -c <"$tmp/readme.txt")" "$out.sampled" | cmp -s - "$tmp/readme.txt" || {
    echo "error: $isa does not write the README's sample" >&2
    exit 1
  }
  awk -v a="$(cat "$tmp/host.ppl")" -v b="$(cat "$out.ppl")" \
    'BEGIN { d = (a - b) / a; if (a == "" || b == "" || d > 0.002 || d < -0.002) exit 1 }' || {
    echo "error: $isa perplexity $(cat "$out.ppl") is not within 0.2% of $(cat "$tmp/host.ppl")" >&2
    exit 1
  }
  echo "-- $isa: README sample and greedy text identical; perplexity $(cat "$out.ppl")"
done

step "ARM 4/4: cargo check --target aarch64-apple-darwin"
cargo check -q -j "$jobs" --workspace --target aarch64-apple-darwin
echo "== ARM pass: ok"
