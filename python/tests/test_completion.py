"""Completions: the text equals the CLI's, the dicts validate as OpenAI's types, streaming
gives the same text, stop strings and limits behave as llama-cpp-python's do."""

import subprocess

import openai.types as oai
import pytest

from conftest import MODEL

PROMPT = "ROMEO:"


def cli_greedy(cli: str, prompt: str, n: int) -> str:
    out = subprocess.run(
        [cli, "generate", "-m", str(MODEL), "-p", prompt, "-n", str(n), "--temp", "0", "--no-echo"],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8")
    assert out.endswith("\n")
    return out[:-1]  # the CLI ends its output with a newline of its own


def test_greedy_text_equals_cli(llm, bitnet_cli):
    want = cli_greedy(bitnet_cli, PROMPT, 40)
    got = llm(PROMPT, max_tokens=40, temperature=0)
    assert got["choices"][0]["text"] == want
    assert got["usage"]["completion_tokens"] == 40
    assert got["choices"][0]["finish_reason"] == "length"


def test_completion_validates_as_openai(llm):
    got = llm.create_completion(PROMPT, max_tokens=8, temperature=0)
    c = oai.Completion.model_validate(got)
    assert c.object == "text_completion"
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    assert c.usage.prompt_tokens == len(llm.tokenize(PROMPT.encode()))


def test_stream_joins_to_the_same_text(llm):
    whole = llm(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    chunks = list(llm(PROMPT, max_tokens=24, temperature=0, stream=True))
    # OpenAI's streamed completion chunks are Completion objects whose finish_reason is
    # null until the last one (the type says otherwise: its client builds chunks without
    # validating). The last chunk validates as it is; the others once given a reason.
    oai.Completion.model_validate(chunks[-1])
    for chunk in chunks[:-1]:
        assert chunk["choices"][0]["finish_reason"] is None
        oai.Completion.model_validate({**chunk, "choices": [{**chunk["choices"][0], "finish_reason": "length"}]})
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert len({c["id"] for c in chunks}) == 1


def test_stop_string_ends_the_answer_and_is_left_out(llm):
    whole = llm(PROMPT, max_tokens=40, temperature=0)["choices"][0]["text"]
    stop = whole[10:14]
    got = llm(PROMPT, max_tokens=40, temperature=0, stop=stop)["choices"][0]
    assert got["text"] == whole[: whole.index(stop)]
    assert got["finish_reason"] == "stop"


def test_seeded_sampling_repeats(llm):
    a = llm(PROMPT, max_tokens=20, temperature=0.9, seed=7)["choices"][0]["text"]
    b = llm(PROMPT, max_tokens=20, temperature=0.9, seed=7)["choices"][0]["text"]
    assert a == b


def test_echo_and_token_prompt(llm):
    tokens = llm.tokenize(PROMPT.encode())
    by_tokens = llm(tokens, max_tokens=8, temperature=0)["choices"][0]["text"]
    echoed = llm(PROMPT, max_tokens=8, temperature=0, echo=True)["choices"][0]["text"]
    assert echoed == PROMPT + by_tokens


def test_tokenize_round_trip_and_metadata(llm):
    text = "Good morrow, cousin."
    tokens = llm.tokenize(text.encode())
    assert llm.detokenize(tokens) == text.encode()
    assert llm.n_ctx() > 0 and llm.n_vocab() == 1024
    assert llm.metadata["general.architecture"]
    assert not any(k == "tokenizer.ggml.tokens" for k in llm.metadata)
    llm.reset()
