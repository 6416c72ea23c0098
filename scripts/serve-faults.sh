#!/usr/bin/env bash
# Fault drill for `bitnet serve` (CI runs it, under a minute): half-open sockets, slow
# senders, SIGTERM under load, kill -9 and restart. Exits non-zero on any lost or
# mislabelled answer. Needs python3 (standard library only). See scripts/serve_faults.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null; then
  echo "error: the serve fault drill needs python3 (standard library only): install it" \
    "(Debian/Ubuntu: apt-get install python3)" >&2
  exit 1
fi
# BITNET_BIN: a binary already built (scripts/test.sh passes the one its tests built).
bin="${BITNET_BIN:-}"
if [ -z "$bin" ]; then
  jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
  cargo build -q -j "$jobs" -p bitnet-cli
  bin="${CARGO_TARGET_DIR:-target}/debug/bitnet"
fi
exec python3 scripts/serve_faults.py --bin "$bin" --model models/shakespeare.gguf "$@"
