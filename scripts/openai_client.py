#!/usr/bin/env python3
"""Checks `bitnet serve` with the official `openai` Python client (pip install openai).

Chat and text completions, whole and streamed, with and without include_usage, n > 1 and
logprobs. Exits non-zero on the first wrong answer. Run it by hand against a server:

    bitnet serve -m models/shakespeare.gguf --port 8080 &
    python3 scripts/openai_client.py --base-url http://127.0.0.1:8080/v1

With `--embeddings EXPECTED.json`, against a server started with `--embeddings`, it checks
`client.embeddings.create` instead: the client's default encoding (base64, in the client
versions that send it) and `encoding_format="float"` must both give the vectors the file
holds, bit for bit as f32 (`{"inputs": [text, ...], "vectors": [[f32, ...], ...],
"prompt_tokens": N}`, as bitnet-cli/tests/serve_embeddings.rs writes it from
`bitnet_core::embed::embed_batch`), `dimensions` a shortened unit vector, an empty input a
400, and a completion a 501. That test runs it under scripts/setup-openai.sh's Python.
"""

import argparse
import base64
import json
import math
import struct
import sys

try:
    import openai
except ImportError:
    sys.exit("the openai package is missing: pip install openai")


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


def f32(x):
    """`x` rounded to the nearest f32, as the server computed it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def values(embedding):
    """An item's values: the client decodes base64 itself only when it chose the encoding;
    asked for explicitly, the string comes back as sent (little-endian f32s)."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return [f32(x) for x in embedding]


def embedding_checks(client, model, expected):
    inputs, want = expected["inputs"], expected["vectors"]

    # The client's default: base64 in the versions that send it, decoded by the client.
    r = client.embeddings.create(model=model, input=inputs)
    check(r.object == "list" and len(r.data) == len(inputs), "embeddings: one item an input")
    check([d.index for d in r.data] == list(range(len(inputs))), "embeddings: in input order")
    check(all(d.object == "embedding" for d in r.data), "embeddings: item objects")
    for i, d in enumerate(r.data):
        check(values(d.embedding) == want[i], f"embeddings (default): vector {i}")
    check(r.usage.prompt_tokens == expected["prompt_tokens"], "embeddings: usage.prompt_tokens")
    check(r.usage.total_tokens == expected["prompt_tokens"], "embeddings: usage.total_tokens")
    check(r.model == model, "embeddings: the model named")

    for fmt in ("float", "base64"):
        r = client.embeddings.create(model=model, input=inputs, encoding_format=fmt)
        for i, d in enumerate(r.data):
            as_asked = isinstance(d.embedding, str) == (fmt == "base64")
            check(as_asked, f"embeddings ({fmt}): as asked")
            check(values(d.embedding) == want[i], f"embeddings ({fmt}): vector {i}")

    # One string, shortened: a unit vector of the first values' direction.
    r = client.embeddings.create(
        model=model, input=inputs[0], dimensions=8, encoding_format="float"
    )
    v = r.data[0].embedding
    check(len(r.data) == 1 and len(v) == 8, "embeddings: dimensions=8 gives 8 values")
    norm = math.sqrt(sum(x * x for x in v))
    check(abs(norm - 1.0) < 1e-5, "embeddings: dimensions renormalizes")
    scale = math.sqrt(sum(x * x for x in want[0][:8]))
    kept = all(abs(x - y / scale) < 1e-6 for x, y in zip(v, want[0][:8]))
    check(kept, "embeddings: dimensions keeps the first values")

    # Token ids, as the client takes them.
    r = client.embeddings.create(model=model, input=[[1, 2, 3], [4, 5]], encoding_format="float")
    check(len(r.data) == 2 and r.usage.prompt_tokens == 5, "embeddings: token-id inputs")

    try:
        client.embeddings.create(model=model, input=[])
        check(False, "an empty input is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "embeddings: an empty input is a 400")
    try:
        client.completions.create(model=model, prompt="x", max_tokens=4)
        check(False, "a completion is refused by an embedding server")
    except openai.APIStatusError as e:
        check(e.status_code == 501, "embeddings: a completion is a 501")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    p.add_argument("--model", default=None, help="default: the first of /v1/models")

    p.add_argument("--embeddings", metavar="EXPECTED.json", help="check embeddings instead")
    a = p.parse_args()

    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0)
    models = client.models.list()
    model = a.model or models.data[0].id
    check(bool(model), f"/v1/models lists {model!r}")
    if a.embeddings:
        with open(a.embeddings) as f:
            embedding_checks(client, model, json.load(f))
        print("all checks passed")
        return

    # Chat, whole.
    r = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Say something."},
        ],
        max_tokens=16,
        seed=1,
    )
    check(r.object == "chat.completion", "chat: object")
    check(r.choices[0].message.role == "assistant", "chat: assistant message")
    check(isinstance(r.choices[0].message.content, str), "chat: text")
    check(r.choices[0].finish_reason in ("stop", "length"), "chat: finish reason")
    check(r.usage.completion_tokens <= 16 and r.usage.prompt_tokens > 0, "chat: usage")
    check(r.usage.prompt_tokens_details.cached_tokens is not None, "chat: cached_tokens")

    # Same seed, same answer.
    r2 = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Say something."},
        ],
        max_tokens=16,
        seed=1,
    )
    check(r2.choices[0].message.content == r.choices[0].message.content, "chat: seeded")

    # Chat, streamed, without usage: no chunk carries usage.
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=12,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(len(chunks) >= 2 and len(text) > 0, "chat stream: text arrives in chunks")
    check(all(getattr(c, "usage", None) is None for c in chunks), "chat stream: no usage unasked")
    check(chunks[-1].choices[0].finish_reason is not None, "chat stream: finish reason")

    # Chat, streamed, with usage: the last chunk has it and no choices.
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    check(last.usage is not None and last.choices == [], "chat stream: usage chunk at the end")
    check(last.usage.completion_tokens <= 12, "chat stream: usage counts")

    # Text completion, whole, n = 2, logprobs.
    r = client.completions.create(
        model=model, prompt="ROMEO:", max_tokens=8, n=2, logprobs=2, seed=3
    )
    check(r.object == "text_completion" and len(r.choices) == 2, "completion: n=2")
    lp = r.choices[0].logprobs
    check(lp is not None and len(lp.tokens) == len(lp.token_logprobs), "completion: logprobs")

    # Text completion, streamed with usage.
    chunks = list(
        client.completions.create(
            model=model,
            prompt="ROMEO:",
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check(len(text) > 0, "completion stream: text")
    check(chunks[-1].usage is not None, "completion stream: usage chunk")

    # Errors come back as the client's exceptions.
    try:
        client.completions.create(model=model, prompt="x", max_tokens=100000)
        check(False, "too many tokens is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "completion: max_tokens beyond the context is a 400")
    print("all checks passed")


if __name__ == "__main__":
    main()
