#!/usr/bin/env python3
"""Checks the trainer's exported logits against an independent implementation: the float32
numpy reference forward pass of the golden test data (testdata/golden/tools/reference.py),
run on the saved checkpoint (bf16 latent weights, widened to f32 exactly).

    python3 tools/train/check_reference.py models/shakespeare-hf models/shakespeare-ref
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "../../testdata/golden/tools")))
import reference  # noqa: E402


def main():
    hf, ref = sys.argv[1], sys.argv[2]
    # reference.py reads safetensors through numpy, which has no bf16: hand it the same values as f32.
    reference.load_file = lambda p: {k: v.float().numpy() for k, v in load_file(p).items()}
    info = json.load(open(os.path.join(ref, "reference.json")))
    theirs = reference.Ref(hf).forward(info["tokens"])
    ours = np.fromfile(os.path.join(ref, info["logits_file"]), "<f4").reshape(len(info["tokens"]), -1)
    rel = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
    cos = float((ours * theirs).sum() / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
    top1 = int((ours.argmax(-1) == theirs.argmax(-1)).sum())
    print(f"{len(info['tokens'])} positions: max |diff| {np.abs(ours - theirs).max():.2e}, "
          f"rel-L2 {rel:.2e}, cosine {cos:.6f}, top-1 agreement {top1}/{len(info['tokens'])}")
    ok = rel <= 1e-3 and top1 == len(info["tokens"])
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
