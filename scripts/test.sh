#!/usr/bin/env bash
# The test suite, as CI runs it: everything with the best kernels this CPU has, then the
# whole suite again with the scalar kernels forced, so the fallbacks stay honest; and the
# embedding examples of bitnet-core run on the shipped model (they exit non-zero when they
# fail), and the server's fault drill (python3); then, on an x86-64 Linux machine, the AArch64 pass under emulation
# (scripts/test-arm.sh: the ARM kernel sets against the reference, the golden logits, the
# shipped model's text; it installs the cross tools it needs). Needs ../shared beside the
# checkout (test data); see README.md and ../shared/data/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
if [ ! -d ../shared/data ]; then
  echo "error: ../shared/data (the test data) must sit beside this checkout" >&2
  exit 1
fi
cargo test --workspace -j "$jobs"
# The server's fault drill (half-open sockets, slow senders, SIGTERM under load, kill -9 and
# restart): exits non-zero on a lost or mislabelled answer.
echo "== serve fault drill"
JOBS="$jobs" ./scripts/serve-faults.sh
for example in generate chat serve_threads; do
  echo "== example $example on models/shakespeare.gguf"
  cargo run -q -j "$jobs" -p bitnet-core --example "$example" -- models/shakespeare.gguf
done
BITNET_KERNEL=scalar cargo test --workspace -j "$jobs"
if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
  if [ "${BITNET_SKIP_ARM:-0}" = 1 ]; then
    echo "== ARM pass SKIPPED (BITNET_SKIP_ARM=1): the ARM kernels were not tested" >&2
  else
    JOBS="$jobs" ./scripts/test-arm.sh
  fi
fi
