"""Structured output (response_format, JSON Schema, GBNF through LlamaGrammar), tool calls,
log probabilities and speculative decoding, written as code for llama-cpp-python's `Llama`
is written (the module imported under that name), every answer validated with the
`openai` package's types."""

import json
import re

import openai.types as oai
import openai.types.chat as oai_chat
import pytest

import bitnet as llama_cpp
from conftest import MODEL, REPO

DRAFT = REPO / "models" / "shakespeare-draft.gguf"
MESSAGES = [{"role": "user", "content": "Who art thou?"}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
        "alive": {"type": "boolean"},
    },
    "required": ["name", "act", "alive"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
}


@pytest.fixture(scope="module")
def wide():
    """The shipped model with room for a tool list: the generic fallback's system message
    alone is longer than its 256-token training context (as the server's tool tests run it
    with -c 2048)."""
    with llama_cpp.Llama(str(MODEL), n_ctx=2048, verbose=False) as model:
        yield model


def check_person(text):
    value = json.loads(text)
    assert set(value) == {"name", "act", "alive"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 12
    assert isinstance(value["act"], int) and 1 <= value["act"] <= 5
    assert isinstance(value["alive"], bool)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_response_format_schema_holds(llm, seed):
    got = llm.create_chat_completion(
        MESSAGES,
        response_format={"type": "json_object", "schema": PERSON},
        temperature=1.0,
        seed=seed,
        max_tokens=120,
    )
    c = oai_chat.ChatCompletion.model_validate(got)
    assert c.choices[0].finish_reason == "stop"
    check_person(c.choices[0].message.content)


def test_openai_json_schema_and_json_object(llm):
    got = llm.create_chat_completion(
        MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
        temperature=0,
        max_tokens=120,
    )
    check_person(oai_chat.ChatCompletion.model_validate(got).choices[0].message.content)
    got = llm.create_chat_completion(
        MESSAGES, response_format={"type": "json_object"}, temperature=0.8, seed=5, max_tokens=160
    )
    if got["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(got["choices"][0]["message"]["content"]), dict)
    else:
        # Cut by max_tokens: what came out is still the start of an object.
        assert got["choices"][0]["message"]["content"].lstrip().startswith("{")


def test_grammar_from_string_and_json_schema(llm):
    grammar = llama_cpp.LlamaGrammar.from_string('root ::= ("yes" | "no") ", my lord" ("." | "!")')
    for seed in range(4):
        text = llm("ROMEO:", grammar=grammar, temperature=1.2, seed=seed, max_tokens=20)["choices"][0]["text"]
        assert re.fullmatch(r"(yes|no), my lord[.!]", text), text
    schema = llama_cpp.llama_grammar.LlamaGrammar.from_json_schema(json.dumps(PERSON))
    got = llm.create_completion("ROMEO:", grammar=schema, temperature=0, max_tokens=120)
    oai.Completion.model_validate(got)
    check_person(got["choices"][0]["text"])
    # A grammar as plain GBNF text, and streamed.
    chunks = list(llm("ROMEO:", grammar='root ::= "a" [b-d]{3}', temperature=1.0, seed=9, stream=True, max_tokens=10))
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert re.fullmatch(r"a[b-d]{3}", text), text


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_enforced_tool_call_arrives_as_tool_calls(wide, choice):
    for seed in range(4):
        got = wide.create_chat_completion(
            [{"role": "user", "content": "What is the weather in Verona?"}],
            tools=[WEATHER, TIME],
            tool_choice=choice,
            # Parallel calls (seeds 1-3) or one: either way the answer closes inside
            # max_tokens (the list ends rather than start a call the budget cannot finish).
            parallel_tool_calls=seed != 0,
            temperature=1.0,
            seed=seed,
            max_tokens=200,
        )
        c = oai_chat.ChatCompletion.model_validate(got)
        assert c.choices[0].finish_reason == "tool_calls", got
        calls = c.choices[0].message.tool_calls
        assert calls and c.choices[0].message.content is None
        if seed == 0:
            assert len(calls) == 1
        for call in calls:
            args = json.loads(call.function.arguments)
            if isinstance(choice, dict):
                assert call.function.name == "get_weather"
            if call.function.name == "get_weather":
                assert set(args) == {"city"} and len(args["city"]) <= 12
            else:
                assert call.function.name == "get_time" and args == {}
            assert call.id.startswith("call_")


def test_streamed_tool_call_matches_the_whole_one(wide):
    kwargs = dict(
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=400,
    )
    messages = [{"role": "user", "content": "Weather in Padua?"}]
    whole = wide.create_chat_completion(messages, **kwargs)
    chunks = list(wide.create_chat_completion(messages, stream=True, **kwargs))
    for chunk in chunks:
        oai_chat.ChatCompletionChunk.model_validate(chunk)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    calls = {}
    for chunk in chunks:
        for d in chunk["choices"][0]["delta"].get("tool_calls") or []:
            entry = calls.setdefault(d["index"], {"name": "", "arguments": ""})
            entry["name"] += d.get("function", {}).get("name") or ""
            entry["arguments"] += d.get("function", {}).get("arguments") or ""
    want = [
        {"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
        for t in whole["choices"][0]["message"]["tool_calls"]
    ]
    assert [calls[i] for i in sorted(calls)] == want


def test_tool_history_renders_and_auto_may_answer_in_text(wide):
    messages = [
        {"role": "user", "content": "Weather in Verona?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Verona"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]
    got = wide.create_chat_completion(messages, tools=[WEATHER], temperature=0, max_tokens=200)
    c = oai_chat.ChatCompletion.model_validate(got)
    message = c.choices[0].message
    assert message.tool_calls or message.content is not None
    if message.tool_calls:
        assert c.choices[0].finish_reason == "tool_calls"


def test_completion_logprobs(llm):
    got = llm("ROMEO:", max_tokens=12, temperature=0, logprobs=3)
    c = oai.Completion.model_validate(got)
    lp = c.choices[0].logprobs
    assert "".join(lp.tokens) == c.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 12
    assert lp.text_offset[0] == 0
    for token, logprob, top, offset in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert logprob <= 0.0
        assert 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)
        assert c.choices[0].text[offset:].startswith(token)
    # Streamed: each chunk's tokens join up to its text, and the whole equals the above.
    chunks = list(llm("ROMEO:", max_tokens=12, temperature=0, logprobs=3, stream=True))
    tokens = []
    # OpenAI's Completion type wants a finish_reason on every choice, which a chunk but the
    # last has none of: each validates once given one.
    oai.Completion.model_validate(chunks[-1])
    for chunk in chunks[:-1]:
        oai.Completion.model_validate({**chunk, "choices": [{**chunk["choices"][0], "finish_reason": "length"}]})
        choice = chunk["choices"][0]
        assert "".join(choice["logprobs"]["tokens"]) == choice["text"]
        tokens += choice["logprobs"]["tokens"]
    assert tokens == lp.tokens
    # Without the argument, no logprobs.
    assert llm("ROMEO:", max_tokens=2, temperature=0)["choices"][0]["logprobs"] is None


def test_chat_logprobs(llm):
    got = llm.create_chat_completion(MESSAGES, max_tokens=10, temperature=0.7, seed=4, logprobs=True, top_logprobs=2)
    c = oai_chat.ChatCompletion.model_validate(got)
    content = c.choices[0].logprobs.content
    assert "".join(t.token for t in content) == c.choices[0].message.content
    assert b"".join(bytes(t.bytes) for t in content) == c.choices[0].message.content.encode()
    for t in content:
        assert t.logprob <= 0.0 and len(t.top_logprobs) <= 2
        assert all(a.logprob >= b.logprob for a, b in zip(t.top_logprobs, t.top_logprobs[1:]))
    chunks = list(
        llm.create_chat_completion(MESSAGES, max_tokens=10, temperature=0.7, seed=4, logprobs=True, stream=True)
    )
    text = ""
    for chunk in chunks:
        oai_chat.ChatCompletionChunk.model_validate(chunk)
        lp = chunk["choices"][0]["logprobs"]
        if lp:
            assert "".join(t["token"] for t in lp["content"]) == chunk["choices"][0]["delta"]["content"]
            text += chunk["choices"][0]["delta"]["content"]
    assert text == c.choices[0].message.content


@pytest.mark.parametrize(
    "draft",
    [
        pytest.param(lambda: llama_cpp.llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=4), id="lookup"),
        pytest.param(lambda: str(DRAFT), id="draft-model"),
    ],
)
def test_speculative_decoding_keeps_the_greedy_text(llm, draft):
    want = llm("ROMEO:", max_tokens=48, temperature=0)["choices"][0]["text"]
    with llama_cpp.Llama(str(MODEL), draft_model=draft(), verbose=False) as fast:
        got = fast("ROMEO:", max_tokens=48, temperature=0)
        assert got["choices"][0]["text"] == want
        # Sampled output under speculation is still a valid answer of the right length.
        sampled = fast("ROMEO:", max_tokens=20, temperature=0.8, seed=3)
        assert sampled["usage"]["completion_tokens"] == 20
