#!/usr/bin/env bash
# Model-checks the thread pool's handshakes with loom: the real pool code (its atomics, mutexes,
# condvars and threads come from loom under `--cfg loom`, bitnet-core/src/threadpool/sync.rs)
# run under every interleaving of a caller and one or two workers, up to 3 preemptions
# (LOOM_MAX_PREEMPTIONS overrides), with loads free to return any value the memory model allows
# (loom gives SeqCst loads and stores only acquire/release meaning, so the handshakes must hold
# under that weaker model). A lost wake-up shows as a loom deadlock (every thread blocked) or
# as a spin that never ends. The models, in bitnet-core/src/threadpool/loom_models.rs: a worker
# asleep before a region is published, a region published while the worker goes to sleep (with
# and without spinning), two regions back to back, the caller going to sleep while the worker
# finishes, shutdown while the worker sleeps and while it starts, a panicking part, and two
# workers. About 12 s of checking once built (a test build of bitnet-core and its dependencies
# with --cfg loom, in `loom/` under the target directory: the flag rebuilds all; about 2.5 min
# cold on 2 cores). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
# Its own folder: --cfg loom would otherwise rebuild (and evict) the normal build's artifacts.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
RUSTFLAGS="--cfg loom" cargo test -j "$jobs" -p bitnet-core --lib threadpool \
  -- --nocapture
