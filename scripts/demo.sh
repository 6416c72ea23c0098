#!/usr/bin/env bash
# The main job on a fresh machine: build the release binary, make a small model with the
# built-in generator (no downloads, no ../shared), and show it with `bitnet inspect`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -j2 -p bitnet-cli
mkdir -p models
./target/release/bitnet gen-model --preset tiny --seed 1 -o models/tiny-i2_s.gguf
./target/release/bitnet inspect models/tiny-i2_s.gguf
