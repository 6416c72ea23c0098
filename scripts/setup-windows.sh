#!/usr/bin/env bash
# What the Windows pass (scripts/test-windows.sh) needs, installed where missing: the Rust
# targets x86_64-pc-windows-gnu (built and run) and x86_64-pc-windows-msvc (only for
# `cargo check`: its linker is Microsoft's), the MinGW-w64 cross toolchain (Debian/Ubuntu:
# mingw-w64) and wine's 64-bit loader (wine64). Idempotent: a machine that has them all is
# left as it is. Other distributions: install the same things by hand (see docs/windows.md).
set -euo pipefail
for target in x86_64-pc-windows-gnu x86_64-pc-windows-msvc; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "== rustup target add $target"
    rustup target add "$target"
  fi
done

missing=()
command -v x86_64-w64-mingw32-gcc >/dev/null || missing+=(mingw-w64)
[ -x /usr/lib/wine/wine64 ] || command -v wine64 >/dev/null || missing+=(wine64)
"$(dirname "$0")/apt-install.sh" Windows ${missing[@]+"${missing[@]}"}
