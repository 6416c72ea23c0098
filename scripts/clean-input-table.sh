#!/usr/bin/env bash
# What `--clean-input` saves on a mixed Unicode corpus (testdata/text/mixed-unicode.md: text as
# web pages, chat apps, PDFs and editors deliver it, with emoji, CJK, Korean, combining marks,
# Persian, Hindi, code blocks; made by hand, see bench/2026-12-07-clean-input.md): tokens and
# unknown tokens with the shipped tokenizer and Llama 3's and Llama 2's (the test data's
# vocab-only GGUFs), off, `all` and `prose`. Prints a markdown table.
#   BITNET (our binary, default target/debug/bitnet), CORPUS (default the file above)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${BITNET:-${CARGO_TARGET_DIR:-target}/debug/bitnet}"
corpus="${CORPUS:-testdata/text/mixed-unicode.md}"
data="$(cargo run -q -p bitnet-testdata)"
echo "| tokenizer | mode | tokens | saved | unknown tokens |"
echo "|---|---|---:|---:|---:|"
for vocab in models/shakespeare.gguf "$data/vocab/ggml-vocab-llama-bpe.gguf" "$data/vocab/ggml-vocab-llama-spm.gguf"; do
  base=""
  for mode in off all prose; do
    flag=()
    [ "$mode" = off ] || flag=("--clean-input=$mode")
    out="$("$bin" tokenize -m "$vocab" -f "$corpus" --show-count --show-unknown "${flag[@]}" 2> /dev/null)"
    n="$(sed -n 's/^Total number of tokens: //p' <<< "$out")"
    unk="$(sed -n 's/^Unknown tokens: //p' <<< "$out")"
    [ -n "$base" ] || base="$n"
    saved="$(python3 -c "print(f'{($base - $n) / $base * 100:.1f}%')")"
    echo "| $(basename "$vocab") | $mode | $n | $saved | $unk |"
  done
done
