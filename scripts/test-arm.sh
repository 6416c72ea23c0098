#!/usr/bin/env bash
# The AArch64 pass of the test suite, on an x86-64 Linux machine: cross-build for
# aarch64-unknown-linux-gnu and run under qemu's user-mode emulator (10-50x slower than native,
# so only what proves the ARM kernels runs here):
#   1. the kernel tests (every SIMD set against the scalar reference), once per emulated CPU:
#      `max` (NEON + dotprod + i8mm: all three sets are tested in that one run),
#      `cortex-a76` (the Raspberry Pi 5's core: NEON + dotprod) and `cortex-a57` (NEON only),
#      each checked to offer exactly the sets named (a lost set fails, it is not skipped);
#   2. the golden logits (bitnet.cpp's and llama.cpp's, ../shared/data/golden) with every ARM
#      set, prefill and decode (the scalar reference is left to the x86 pass: it is the same
#      portable code, and the slow part under emulation);
#   3. the shipped model: the README's text and greedy text byte for byte as this machine's own
#      build writes them, and the held-out perplexity to the printed digits, with each ARM set;
#   4. `cargo check` for aarch64-apple-darwin (macOS; nothing there can run it here).
# On an ARM machine none of this is needed: `scripts/test.sh` tests the sets the CPU has.
# scripts/setup-arm.sh installs what is missing (rustup target, cross gcc, qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

./scripts/setup-arm.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
runner() { echo "qemu-aarch64 -L $sysroot -cpu $1"; }

echo "== ARM 1/4: kernel tests under emulation"
for cpu_sets in max:scalar,neon,dotprod,i8mm cortex-a76:scalar,neon,dotprod cortex-a57:scalar,neon; do
  cpu="${cpu_sets%%:*}"
  sets="${cpu_sets#*:}"
  echo "-- qemu -cpu $cpu: kernel sets $sets"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner "$cpu")" BITNET_EXPECT_KERNELS="$sets" \
    cargo test -q -j "$jobs" -p bitnet-kernels --target "$target"
done

echo "== ARM 2/4: golden logits, every ARM kernel set (qemu -cpu max)"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner max)" BITNET_TEST_KERNELS=neon,dotprod,i8mm \
  cargo test -q -j "$jobs" -p bitnet-core --target "$target" --test golden_engine

echo "== ARM 3/4: the shipped model, emulated against this machine's build"
cargo build -q -j "$jobs" -p bitnet-cli --target "$target"
cargo build -q -j "$jobs" -p bitnet-cli
arm_bitnet="${CARGO_TARGET_DIR:-target}/$target/debug/bitnet"
host_bitnet="${CARGO_TARGET_DIR:-target}/debug/bitnet"
model=models/shakespeare.gguf
heldout=models/shakespeare-ref/heldout.txt
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The README's sample, the lines between its command and the end of the block.
awk '/^\$ bitnet generate -m models\/shakespeare.gguf -p "ROMEO:" -n 80 -s 1$/{on=1; next}
     on && /^```/{exit} on' README.md >"$tmp/readme.txt"
[ -s "$tmp/readme.txt" ] || { echo "error: README sample not found" >&2; exit 1; }
outputs_of() { # the three outputs compared: sampled text, greedy text, perplexity line
  "$@" generate -m "$model" -p "ROMEO:" -n 80 -s 1 2>/dev/null >"$out.sampled"
  "$@" generate -m "$model" -p "ROMEO:" -n 80 --temp 0 2>/dev/null >"$out.greedy"
  "$@" perplexity -m "$model" -f "$heldout" -c 256 2>&1 | grep '^Final estimate' >"$out.ppl"
}
out="$tmp/host"
outputs_of "$host_bitnet"
echo "-- this machine ($(uname -m)): $(cat "$out.ppl")"
for isa in neon dotprod i8mm; do
  out="$tmp/$isa"
  BITNET_KERNEL=$isa outputs_of qemu-aarch64 -L "$sysroot" -cpu max "$arm_bitnet"
  for kind in sampled greedy ppl; do
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
  echo "-- $isa: README sample, greedy text and '$(cat "$out.ppl")' identical"
done

echo "== ARM 4/4: cargo check --target aarch64-apple-darwin"
cargo check -q -j "$jobs" --workspace --target aarch64-apple-darwin
echo "== ARM pass: ok"
