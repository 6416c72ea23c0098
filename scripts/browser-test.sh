#!/usr/bin/env bash
# The web page of `bitnet serve` in a real browser (CI runs it after the workspace tests,
# under a minute): loads the page, streams a reply, stops one, reloads, switches
# conversations, tries XSS payloads, and saves screenshots (target/browser-test/, copied to
# docs/img/). Installs headless Chromium and chromedriver where missing
# (scripts/setup-browser.sh). See scripts/browser_test.py.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-browser.sh
# BITNET_BIN: a binary already built (scripts/test.sh passes the one its tests built).
bin="${BITNET_BIN:-}"
if [ -z "$bin" ]; then
  jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
  cargo build -q -j "$jobs" -p bitnet-cli
  bin="${CARGO_TARGET_DIR:-target}/debug/bitnet"
fi
exec python3 scripts/browser_test.py --bin "$bin" "$@"
