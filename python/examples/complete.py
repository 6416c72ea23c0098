"""Complete, stream, chat and embed with the shipped model:

    pip install ./python
    python python/examples/complete.py [models/shakespeare.gguf]
"""

import pathlib
import sys

from bitnet import Llama

default = pathlib.Path(__file__).resolve().parents[2] / "models" / "shakespeare.gguf"
path = sys.argv[1] if len(sys.argv) > 1 else str(default)

llm = Llama(path, verbose=False)

# A greedy completion: the same text as `bitnet generate -p "ROMEO:" -n 40 --temp 0`.
out = llm("ROMEO:", max_tokens=40, temperature=0)
print(out["choices"][0]["text"])
print(out["usage"])

# The same, streamed as it is produced.
for chunk in llm("JULIET:", max_tokens=40, temperature=0.8, seed=1, stream=True):
    print(chunk["choices"][0]["text"], end="", flush=True)
print()

# A chat turn, rendered with the model's chat template.
reply = llm.create_chat_completion([{"role": "user", "content": "Who art thou?"}], max_tokens=32)
print(reply["choices"][0]["message"]["content"])

# Embeddings (last-token pooling, Euclidean-normalized).
embedder = Llama(path, embedding=True, verbose=False)
vectors = embedder.embed(["To be", "or not to be"])
print(len(vectors), "vectors of", len(vectors[0]))
