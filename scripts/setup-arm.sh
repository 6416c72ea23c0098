#!/usr/bin/env bash
# What the emulated AArch64 pass (scripts/test-arm.sh) needs, installed where missing:
# the Rust targets aarch64-unknown-linux-gnu and aarch64-apple-darwin (rustup; the second only
# for `cargo check`), a cross linker and the AArch64 C
# runtime (Debian/Ubuntu: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and qemu's user-mode
# emulator (qemu-user). Idempotent: a machine that has them all is left as it is. Other
# distributions: install the same three things by hand (see README.md, "ARM").
set -euo pipefail
for target in aarch64-unknown-linux-gnu aarch64-apple-darwin; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "== rustup target add $target"
    rustup target add "$target"
  fi
done

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
[ -d /usr/aarch64-linux-gnu/lib ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
"$(dirname "$0")/apt-install.sh" ARM ${missing[@]+"${missing[@]}"}
