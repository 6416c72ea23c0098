#!/usr/bin/env python3
"""Checks `bitnet serve`'s structured output and tool calls with the `openai` client and LangChain.

The openai client: `chat.completions.parse` with a pydantic model (or `beta.chat.completions.parse`
in older versions), `response_format` json_object and json_schema, tools with tool_choice
"required" and a named function (whole and streamed), a cut answer's finish reason, and a
follow-up with the assistant's calls and a `tool` result in the history. LangChain
(langchain-openai's ChatOpenAI): `bind_tools` with a required and a named tool, and
`with_structured_output` by function calling, json_schema and json_mode. Every call's arguments
and every answer are checked against their schema, with the `jsonschema` package when it is
installed (pydantic always). The LangChain part is skipped, with a message, when
langchain-openai is missing. Exits non-zero on the first wrong answer.

CI does not run it (it needs packages from the registry); run it by hand against a server.
The shipped model's context (256) is too short for tool prompts, so give it more:

    pip install openai langchain-openai jsonschema pydantic
    bitnet serve -m models/shakespeare.gguf --port 8080 -c 2048 &
    python3 scripts/structured_clients.py --base-url http://127.0.0.1:8080/v1
    python3 scripts/structured_clients.py --seed 7 --temperature 1

The model's text is gibberish; under the constraints it must still parse and validate.
Tested with openai 3.57.0, langchain-openai 1.7.4 (langchain-core 1.8.3), pydantic 2.13.4,
jsonschema 4.26.0, Python 3.11.
"""

import argparse
import json
import sys
from typing import Literal

try:
    import openai
    from pydantic import BaseModel, Field, ValidationError
except ImportError:
    sys.exit("the openai and pydantic packages are missing: pip install openai pydantic")

try:
    import jsonschema
except ImportError:
    jsonschema = None


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


def parses(text, what):
    """`text` read as JSON; a failed check when it is not."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        check(False, f"{what}: parses: {str(text)[:300]!r}")


def validates(value, schema):
    """Whether `value` satisfies `schema` (always true without the jsonschema package)."""
    if jsonschema is None:
        return True
    try:
        jsonschema.validate(value, schema)
        return True
    except jsonschema.ValidationError as e:
        print(f"  {e.message} in {json.dumps(value)[:300]}")
        return False


# Short strings (max_length) and bounded integers so that a weak model's answers end within
# max_tokens: greedy, it repeats a digit for ever where an integer has no maximum.
class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population: int = Field(ge=0, le=100_000_000)


class Weather(BaseModel):
    """Weather at a place."""

    city: str = Field(max_length=20, description="the city")
    unit: Literal["celsius", "fahrenheit"]


class Person(BaseModel):
    """A person."""

    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=150)


WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME_PARAMS = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 12}, "hours24": {"type": "boolean"}},
    "required": ["zone"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER_PARAMS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a time zone.",
            "parameters": TIME_PARAMS,
        },
    },
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
# Parallel calls: the server admits up to 8 in an answer, and a weak model often writes them
# all (some 80 tokens each here), so leave room for them.
CALLS_TOKENS = 1200

# Nested object, enum, bounded array, anyOf.
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "status": {"enum": ["open", "shipped", "closed"]},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "maxLength": 8},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                },
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "note": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]},
    },
    "required": ["id", "status", "items", "note"],
    "additionalProperties": False,
}


def call_problem(name, arguments, names):
    """What is wrong with one call (None: nothing)."""
    if name not in names:
        return f"names {name!r}, not one of {sorted(names)}"
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return f"arguments do not parse: {arguments!r}"
    if not isinstance(args, dict):
        return f"arguments are not an object: {arguments!r}"
    if not validates(args, PARAMS[name]):
        return f"arguments do not validate: {arguments!r}"
    return None


def valid_calls(calls, what, names=None):
    """Each call has an id, a known (or the named) function and arguments that validate."""
    check(len(calls) >= 1, f"{what}: at least one call")
    for i, c in enumerate(calls):
        check(bool(c.id) and c.type == "function", f"{what}: call {i} has an id and type function")
        problem = call_problem(c.function.name, c.function.arguments, names or PARAMS.keys())
        call = f"{c.function.name}({c.function.arguments})"
        check(problem is None, f"{what}: call {i} {call} {problem or 'validates'}")


def openai_checks(client, model, seed, temperature):
    common = dict(model=model, seed=seed, temperature=temperature)
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse

    # parse() with a pydantic model: the client sends a strict json_schema and reads it back.
    r = parse(
        messages=[{"role": "user", "content": "Name a city."}],
        response_format=City,
        max_tokens=300,
        **common,
    )
    m = r.choices[0].message
    check(r.choices[0].finish_reason == "stop", "parse: finish reason stop")
    check(isinstance(m.parsed, City), f"parse: parsed City {m.parsed!r}")
    check(m.refusal is None, "parse: no refusal")

    # json_object: some JSON object. Its strings have no bound, and sampled at temperature 1
    # this model's first key often runs past any max_tokens; such an answer must say "length".
    # Every answer that ends must parse, and some seed of a few must end.
    ended = 0
    for i in range(8):
        r = client.chat.completions.create(
            messages=[{"role": "user", "content": "Answer in JSON."}],
            response_format={"type": "json_object"},
            max_tokens=300,
            **dict(common, seed=seed + i),
        )
        ch = r.choices[0]
        text = ch.message.content
        check(ch.finish_reason in ("stop", "length"), "json_object: finish reason stop or length")
        check(text.startswith("{"), "json_object: begins an object")
        if ch.finish_reason == "length":
            check(r.usage.completion_tokens == 300, "json_object: cut at max_tokens")
            continue
        value = parses(text, "json_object")
        check(isinstance(value, dict), f"json_object: an object ({len(text)} chars)")
        ended += 1
        if ended == 2:
            break
    check(ended >= 1, f"json_object: {ended} of {i + 1} answers ended within max_tokens")

    # json_schema: nested, enum, array, anyOf.
    r = client.chat.completions.create(
        messages=[{"role": "user", "content": "Give me an order."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True},
        },
        max_tokens=400,
        **common,
    )
    text = r.choices[0].message.content
    check(r.choices[0].finish_reason == "stop", "json_schema: finish reason stop")
    value = parses(text, "json_schema")
    check(validates(value, ORDER_SCHEMA), f"json_schema: validates {text}")

    # A cut answer says so.
    r = client.chat.completions.create(
        messages=[{"role": "user", "content": "Give me an order."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "o", "schema": ORDER_SCHEMA},
        },
        max_tokens=3,
        **common,
    )
    check(r.choices[0].finish_reason == "length", "json_schema: cut by max_tokens is 'length'")

    # Tools, required: a call to either function.
    ask = [{"role": "user", "content": "What is the weather in Verona?"}]
    r = client.chat.completions.create(
        messages=ask, tools=TOOLS, tool_choice="required", max_tokens=CALLS_TOKENS, **common
    )
    ch = r.choices[0]
    check(ch.finish_reason == "tool_calls", "tools required: finish reason tool_calls")
    valid_calls(ch.message.tool_calls, "tools required")
    whole = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls]

    # Tools, named, one call only.
    r = client.chat.completions.create(
        messages=ask,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
        max_tokens=400,
        **common,
    )
    ch = r.choices[0]
    check(ch.finish_reason == "tool_calls", "tools named: finish reason tool_calls")
    check(len(ch.message.tool_calls) == 1, "tools named: one call without parallel calls")
    valid_calls(ch.message.tool_calls, "tools named", names={"get_weather"})
    first = ch.message

    # Tools, streamed: fragments by index reassemble into valid calls.
    chunks = list(
        client.chat.completions.create(
            messages=ask,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=CALLS_TOKENS,
            stream=True,
            **common,
        )
    )
    calls, finish = {}, None
    for c in chunks:
        if not c.choices:
            continue
        d = c.choices[0].delta
        for t in d.tool_calls or []:
            slot = calls.setdefault(t.index, {"id": None, "name": "", "arguments": ""})
            if t.id:
                slot["id"] = t.id
            if t.function and t.function.name:
                slot["name"] += t.function.name
            if t.function and t.function.arguments:
                slot["arguments"] += t.function.arguments
        finish = c.choices[0].finish_reason or finish
    check(finish == "tool_calls", "tools streamed: finish reason tool_calls")
    check(sorted(calls) == list(range(len(calls))), "tools streamed: indexes 0..n")
    streamed = [
        openai.types.chat.ChatCompletionMessageToolCall(
            id=s["id"] or "",
            type="function",
            function={"name": s["name"], "arguments": s["arguments"]},
        )
        for _, s in sorted(calls.items())
    ]
    valid_calls(streamed, "tools streamed")
    # Same request, same seed: the same calls as the whole answer above.
    same = [(c.function.name, c.function.arguments) for c in streamed] == whole
    check(same, "tools streamed: the same calls as the whole answer")

    # The calls and their results in the history: accepted, and answered.
    history = ask + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in first.tool_calls
            ],
        }
    ]
    history += [
        {"role": "tool", "tool_call_id": c.id, "content": '{"temperature": 21, "sky": "clear"}'}
        for c in first.tool_calls
    ]
    raw = client.chat.completions.with_raw_response.create(
        messages=history, tools=TOOLS, tool_choice="none", max_tokens=40, **common
    )
    check(raw.http_response.status_code == 200, "history with tool_calls and a tool result: 200")
    r = raw.parse()
    check(isinstance(r.choices[0].message.content, str), "history: the answer is text")
    check(not r.choices[0].message.tool_calls, "history: tool_choice none makes no call")

    # "auto": either text or valid calls.
    r = client.chat.completions.create(messages=ask, tools=TOOLS, max_tokens=CALLS_TOKENS, **common)
    ch = r.choices[0]
    if ch.message.tool_calls:
        check(ch.finish_reason == "tool_calls", "tools auto: calls end with tool_calls")
        valid_calls(ch.message.tool_calls, "tools auto")
    else:
        check(isinstance(ch.message.content, str), "tools auto: a text answer")
        check(ch.finish_reason in ("stop", "length"), "tools auto: text ends with stop or length")


def langchain_checks(base_url, api_key, model, seed, temperature):
    try:
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI
    except ImportError:
        print("skipped: LangChain checks (pip install langchain-openai)")
        return

    def chat_model(seed):
        return ChatOpenAI(
            base_url=base_url,
            api_key=api_key,
            model=model,
            max_tokens=CALLS_TOKENS,
            temperature=temperature,
            seed=seed,
            max_retries=0,
        )

    llm = chat_model(seed)

    # Schemas from pydantic models, for max_length: a string from a bare `city: str` runs to
    # max_tokens.
    @tool(args_schema=Weather)
    def get_weather(city: str, unit: str) -> str:
        """The weather in a city."""
        return f"21 degrees {unit} in {city}"

    @tool(args_schema=Person)
    def add_person(name: str, age: int) -> str:
        """Adds a person."""
        return f"{name}, {age}"

    lc_params = {
        "get_weather": Weather.model_json_schema(),
        "add_person": Person.model_json_schema(),
    }

    def valid_lc_calls(msg, what, names):
        check(isinstance(msg, AIMessage), f"{what}: an AIMessage")
        check(len(msg.tool_calls) >= 1, f"{what}: tool_calls not empty")
        check(not msg.invalid_tool_calls, f"{what}: no invalid tool calls")
        for i, c in enumerate(msg.tool_calls):
            ok = c["name"] in names and bool(c["id"]) and validates(c["args"], lc_params[c["name"]])
            check(ok, f"{what}: call {i} {c['name']}({c['args']}) has an id and validates")

    q = "What is the weather in Verona?"
    msg = llm.bind_tools([get_weather, add_person], tool_choice="required").invoke(q)
    valid_lc_calls(msg, "langchain bind_tools required", {"get_weather", "add_person"})
    check(msg.response_metadata.get("finish_reason") == "tool_calls", "langchain: finish reason")

    msg = llm.bind_tools(
        [get_weather, add_person], tool_choice="add_person", parallel_tool_calls=False
    ).invoke(q)
    valid_lc_calls(msg, "langchain bind_tools named", {"add_person"})
    check(len(msg.tool_calls) == 1, "langchain bind_tools named: one call without parallel calls")
    try:
        Person(**msg.tool_calls[0]["args"])
    except ValidationError as e:
        check(False, f"langchain bind_tools named: args make a Person: {e}")

    for method in ("function_calling", "json_schema"):
        try:
            out = llm.with_structured_output(Person, method=method).invoke("Describe a person.")
        except (ValidationError, openai.APIError) as e:
            check(False, f"langchain with_structured_output {method}: {e}")
        check(isinstance(out, Person), f"langchain with_structured_output {method}: {out!r}")

    # include_raw: the raw message and no parsing error.
    out = llm.with_structured_output(Person, method="function_calling", include_raw=True).invoke(
        "Describe a person."
    )
    ok = out["parsing_error"] is None and isinstance(out["parsed"], Person)
    check(ok, "langchain include_raw: parsed, no parsing error")

    # json_mode sends only {"type": "json_object"}: the schema never reaches the server, so
    # the object parses but need not have Person's fields; ask for a dict. As with json_object
    # above, sampled strings may run past max_tokens (the client then raises); some seed of a
    # few must give an object.
    schema = Person.model_json_schema()
    out, tries = None, 0
    for tries in range(1, 9):
        try:
            out = chat_model(seed + tries - 1).with_structured_output(
                schema, method="json_mode"
            ).invoke("Describe a person as JSON with keys name and age.")
            break
        except openai.LengthFinishReasonError:
            continue
    what = f"langchain with_structured_output json_mode: a dict after {tries} tries: {out!r}"
    check(isinstance(out, dict), what)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    p.add_argument("--api-key", default="none", help="the server's --api-key, if it has one")
    p.add_argument("--model", default=None, help="default: the first of /v1/models")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.0)
    a = p.parse_args()

    if jsonschema is None:
        print("note: jsonschema is missing: raw JSON and tool arguments are parsed, not validated")
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0)
    model = a.model or client.models.list().data[0].id
    check(bool(model), f"/v1/models lists {model!r}")

    openai_checks(client, model, a.seed, a.temperature)
    langchain_checks(a.base_url, a.api_key, model, a.seed, a.temperature)
    print("all checks passed")


if __name__ == "__main__":
    main()
