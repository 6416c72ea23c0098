#!/usr/bin/env python3
"""Checks `bitnet serve` with the official `openai` Python client (pip install openai).

Chat and text completions, whole and streamed, with and without include_usage, n > 1 and
logprobs. Exits non-zero on the first wrong answer. CI does not run it (it needs the
package from the registry); run it by hand against a server:

    bitnet serve -m models/shakespeare.gguf --port 8080 &
    python3 scripts/openai_client.py --base-url http://127.0.0.1:8080/v1
"""

import argparse
import sys

try:
    import openai
except ImportError:
    sys.exit("the openai package is missing: pip install openai")


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    p.add_argument("--model", default=None, help="default: the first of /v1/models")
    a = p.parse_args()

    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key)
    models = client.models.list()
    model = a.model or models.data[0].id
    check(bool(model), f"/v1/models lists {model!r}")

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
