#!/usr/bin/env python3
"""Perplexity of a trained checkpoint on the held-out text, by llama.cpp's method, so that
`bitnet perplexity -m MODEL.gguf -f HELDOUT.txt -c N` can be compared with it.

    python3 tools/train/eval.py models/shakespeare-hf [-f models/shakespeare-ref/heldout.txt] [-c 256]

Method (llama.cpp `perplexity`): the text is tokenized with BOS first (the tokenizer adds it,
add_bos_token = true); the token list is cut into non-overlapping windows of n_ctx tokens
(the remainder is dropped); each window's first token is replaced by BOS and the window is
evaluated from position 0; only its second half is scored: the logits at positions
n_ctx/2 .. n_ctx-2 against the next token (n_ctx - 1 - n_ctx/2 tokens per window).
PPL = exp(mean negative log-likelihood), printed with its standard error as llama.cpp does.
The weights are the stored bf16 latent weights, ternarized per matrix (absmean) and run with
per-token int8 activations: the engine's math.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from evaluate import perplexity, unigram_ppl  # noqa: E402
from model import load_hf  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hf_dir")
    p.add_argument("-f", "--file", help="text to score (default: the held-out 10%% of --text)")
    p.add_argument("--text", default=data.DEFAULT_TEXT, help="the full text (for the split and the unigram baseline)")
    p.add_argument("-c", "--ctx", type=int, default=None, help="window (default: max_position_embeddings)")
    p.add_argument("--chunks", type=int, default=None, help="score only the first N windows")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    model = load_hf(a.hf_dir)
    tok = data.load_tokenizer(os.path.join(a.hf_dir, "tokenizer.json"))
    bos = tok.token_to_id(data.BOS)
    n_ctx = a.ctx or model.c["max_position_embeddings"]
    full = open(a.text, encoding="utf-8").read()
    train_text, held_text = data.split(full)
    text = open(a.file, encoding="utf-8").read() if a.file else held_text
    ids = tok.encode(text).ids
    assert ids[0] == bos
    ppl, se, n = perplexity(model, ids, bos, n_ctx, max_chunks=a.chunks)
    n_chunks = n // (n_ctx - 1 - n_ctx // 2)
    train_ids = tok.encode(train_text, add_special_tokens=False).ids
    uni = unigram_ppl(train_ids, ids[:n_chunks * n_ctx], bos, n_ctx, model.c["vocab_size"])
    print(f"{len(ids)} tokens (BOS included), {n_chunks} windows of {n_ctx}, {n} tokens scored")
    print(f"Final estimate: PPL = {ppl:.4f} +/- {se:.5f}")
    print(f"unigram baseline PPL on the same tokens = {uni:.4f}")


if __name__ == "__main__":
    main()
