#!/usr/bin/env bash
# The main job on a fresh machine: build the release binary, make a small model with the
# built-in generator (no downloads, no ../shared), show it with `bitnet inspect`, and run it.
# The weights are random, so the generated text is noise: the point is the whole pipeline
# (GGUF writer -> reader -> repacked kernels -> tokenizer -> sampler -> streaming output).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
cargo build --release -j "$jobs" -p bitnet-cli
mkdir -p models
bin="${CARGO_TARGET_DIR:-target}/release/bitnet"
$bin gen-model --preset tiny --weight-type i2_s --seed 1 -o models/tiny-i2_s.gguf
$bin inspect models/tiny-i2_s.gguf --weights
echo
echo "== generate: this model's weights are RANDOM (no trained model ships yet), so the text"
echo "== below is noise, often U+FFFD marks for byte tokens that are not UTF-8. It shows the"
echo "== pipeline working (tokenizer -> kernels -> sampler -> streaming), not quality."
$bin generate -m models/tiny-i2_s.gguf -p "Once upon a time" -n 32 --seed 1
