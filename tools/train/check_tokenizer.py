#!/usr/bin/env python3
"""Checks that our engine's tokenizer reproduces the trained tokenizer.json (HF `tokenizers`)
exactly: writes a vocab-only GGUF (gpt2 model, `gpt-2` pre-tokenizer) from tokenizer.json, runs
`bitnet tokenize` on the held-out text, the training text in 100,000-character pieces, and
llama.cpp's gpt-2 tokenizer test strings, and compares the ids.

    cargo build --release -p bitnet-cli
    python3 tools/train/check_tokenizer.py models/shakespeare-hf [--bitnet target/release/bitnet]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.normpath(os.path.join(HERE, "../../testdata"))

T_U32, T_I32, T_BOOL, T_STR, T_ARR = 4, 5, 7, 8, 9


def gguf_str(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def vocab_gguf(tj, path):
    """A GGUF v3 file with no tensors and the tokenizer metadata of tokenizer.json `tj`."""
    vocab = tj["model"]["vocab"]
    toks = [None] * len(vocab)
    for t, i in vocab.items():
        toks[i] = t
    special = {a["id"] for a in tj["added_tokens"] if a["special"]}
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    bos = next(a["id"] for a in tj["added_tokens"] if a["content"] == "<|begin_of_text|>")
    eos = next(a["id"] for a in tj["added_tokens"] if a["content"] == "<|end_of_text|>")
    kv = []

    def add(key, ty, payload):
        kv.append(gguf_str(key) + struct.pack("<I", ty) + payload)

    def str_array(xs):
        return struct.pack("<IQ", T_STR, len(xs)) + b"".join(gguf_str(x) for x in xs)

    add("general.architecture", T_STR, gguf_str("bitnet-b1.58"))
    add("tokenizer.ggml.model", T_STR, gguf_str("gpt2"))
    add("tokenizer.ggml.pre", T_STR, gguf_str("gpt-2"))
    add("tokenizer.ggml.tokens", T_ARR, str_array(toks))
    types = b"".join(struct.pack("<i", 3 if i in special else 1) for i in range(len(toks)))
    add("tokenizer.ggml.token_type", T_ARR, struct.pack("<IQ", T_I32, len(toks)) + types)
    add("tokenizer.ggml.merges", T_ARR, str_array(merges))
    add("tokenizer.ggml.bos_token_id", T_U32, struct.pack("<I", bos))
    add("tokenizer.ggml.eos_token_id", T_U32, struct.pack("<I", eos))
    add("tokenizer.ggml.add_bos_token", T_BOOL, struct.pack("<?", True))
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("hf_dir")
    p.add_argument("--bitnet", default=os.path.normpath(os.path.join(HERE, "../../target/release/bitnet")))
    a = p.parse_args()
    tpath = os.path.join(a.hf_dir, "tokenizer.json")
    tok = Tokenizer.from_file(tpath)
    full = open(os.path.join(TESTDATA, "text/tinyshakespeare.txt"), encoding="utf-8").read()
    cases = [full[i:i + 100000] for i in range(0, len(full), 100000)]
    tests = open(os.path.join(TESTDATA, "vocab/ggml-vocab-gpt-2.gguf.inp"), encoding="utf-8").read()
    cases += [c for c in tests.split("\n__ggml_vocab_test__\n") if c]
    cases += ["  leading spaces\n\n\n  and   tabs\t\tend  ", "café naïve — “quotes” 日本語 🎭"]
    with tempfile.TemporaryDirectory() as d:
        g = os.path.join(d, "vocab.gguf")
        vocab_gguf(json.load(open(tpath, encoding="utf-8")), g)
        bad = 0
        for c in cases:
            r = subprocess.run([a.bitnet, "tokenize", "-m", g, c], capture_output=True, text=True, check=True)
            ours, theirs = json.loads(r.stdout), tok.encode(c).ids
            if ours != theirs:
                bad += 1
                print(f"MISMATCH {c[:60]!r}: {len(ours)} vs {len(theirs)} tokens")
    print(f"{len(cases) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
