#!/usr/bin/env bash
# The test suite, as CI runs it: everything with the best kernels this CPU has, then the
# whole suite again with the scalar kernels forced, so the fallbacks stay honest.
# Needs ../shared beside the checkout (test data); see README.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/data ]; then
  echo "error: ../shared/data (the test data) must sit beside this checkout" >&2
  exit 1
fi
cargo test --workspace -j2
BITNET_KERNEL=scalar cargo test --workspace -j2
