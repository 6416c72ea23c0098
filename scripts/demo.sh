#!/usr/bin/env bash
# The main job on a fresh machine: build the release binaries, then run the small BitNet
# b1.58 model this repository ships (trained here on Shakespeare, tools/train/; converted
# from its Hugging Face checkpoint by bitnet-convert): show it, let it write, measure its
# perplexity on the held-out text, and open a chat with it (on a terminal; piped, a short
# scripted conversation). No downloads, no test data.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every core by default; JOBS=N to share the machine.
jobs="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
cargo build --release -j "$jobs" -p bitnet-cli -p bitnet-convert
dir="${CARGO_TARGET_DIR:-target}/release"
model=models/shakespeare.gguf
# The shipped GGUF is exactly what the converter makes of the shipped checkpoint.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$dir/bitnet-convert" models/shakespeare-hf -o "$tmp/shakespeare.gguf" --outtype i2_s
cmp "$tmp/shakespeare.gguf" "$model" && echo "== $model: reproduced byte for byte by bitnet-convert"
"$dir/bitnet" inspect "$model"
echo
echo "== generate: a 2.6M-parameter ternary model trained for 19 minutes on 1 MB of Shakespeare."
echo "== Expect speaker names, verse line breaks and English-like words, not sense."
"$dir/bitnet" generate -m "$model" -p "ROMEO:" -n 96 --seed 1
echo
echo "== perplexity on the held-out 10% of the text (the trainer measured 34.33; unigram 305.7)"
"$dir/bitnet" perplexity -m "$model" -f models/shakespeare-ref/heldout.txt -c 256 | tail -n 1
echo
echo "== chat: the conversation stays in the KV cache, so each turn reads only its own tokens"
if [ -t 0 ] && [ -t 1 ]; then
  echo "== (a base model: it answers in Shakespeare's voice, not sense; Ctrl-D or /bye quits)"
  exec "$dir/bitnet" chat -m "$model" -v
else
  printf 'Good morrow, what news?\nWho art thou?\n' |
    "$dir/bitnet" chat -m "$model" -v --seed 1
fi
