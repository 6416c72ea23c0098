#!/usr/bin/env python3
"""How often constrained answers close inside their `max_tokens`: seeded chat requests with
`tool_choice` "required" (parallel calls allowed) and with a JSON schema `response_format`
against a running `bitnet serve`, counted by finish reason and by whether the answer parses.
Standard library only.

    bitnet serve -m models/shakespeare.gguf -c 2048 --parallel 8 --port 8080 &
    python3 scripts/tool_budget.py --base-url http://127.0.0.1:8080 --n 30

The record of issue 51's budget-aware closing (bench/) has its figures before and after.
"""

import argparse
import concurrent.futures
import json
import urllib.request

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}},
                       "required": ["zone"]}}},
]
# Free strings and an unbounded list: nothing but the budget bounds the answer.
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "lines": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "lines"]}


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def tool_answer(base, seed, args):
    r = post(base, {"messages": [{"role": "user", "content": "Weather in Verona and the time in Rome?"}],
                    "tools": TOOLS, "tool_choice": "required", "seed": seed,
                    "temperature": args.temperature, "max_tokens": args.max_tokens})
    c = r["choices"][0]
    calls = c["message"].get("tool_calls") or []
    ok = bool(calls) and all(json.loads(k["function"]["arguments"]) is not None for k in calls)
    return c["finish_reason"], ok


def schema_answer(base, seed, args):
    r = post(base, {"messages": [{"role": "user", "content": "Who art thou?"}],
                    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
                    "seed": seed, "temperature": args.temperature, "max_tokens": args.schema_max_tokens})
    c = r["choices"][0]
    try:
        json.loads(c["message"]["content"])
        ok = True
    except ValueError:
        ok = False
    return c["finish_reason"], ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--temperature", type=float, default=1.2)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--schema-max-tokens", type=int, default=64)
    args = ap.parse_args()
    for name, fn in [("tool_choice required", tool_answer), ("json_schema", schema_answer)]:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda s: fn(args.base_url, s, args), range(1, args.n + 1)))
        reasons = {}
        for reason, _ in results:
            reasons[reason] = reasons.get(reason, 0) + 1
        parsed = sum(ok for _, ok in results)
        print(f"{name}: {args.n} requests at temperature {args.temperature}: finish reasons "
              f"{dict(sorted(reasons.items()))}, {parsed} parse")


if __name__ == "__main__":
    main()
