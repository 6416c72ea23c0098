"""Complete, stream, chat, answer in JSON, call a tool and embed with the shipped model:

    pip install ./python
    python python/examples/complete.py [models/shakespeare.gguf]
"""

import json
import pathlib
import sys

from bitnet import Llama, LlamaGrammar

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

# An answer that follows a JSON Schema (OpenAI's response_format, as llama-cpp-python takes it).
schema = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "act": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["name", "act"],
}
reply = llm.create_chat_completion(
    [{"role": "user", "content": "Name a character and an act."}],
    response_format={"type": "json_object", "schema": schema},
    max_tokens=80,
)
print(json.loads(reply["choices"][0]["message"]["content"]))

# A GBNF grammar, as llama-cpp-python's LlamaGrammar.
yes_no = LlamaGrammar.from_string('root ::= ("Ay" | "Nay") ", my lord."')
print(llm("Wilt thou come?", grammar=yes_no, max_tokens=10)["choices"][0]["text"])

# A tool call the model must make: it arrives as message.tool_calls.
weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]},
    },
}
reply = llm.create_chat_completion(
    [{"role": "user", "content": "Weather in Verona?"}], tools=[weather], tool_choice="required", max_tokens=100
)
print(reply["choices"][0]["finish_reason"], reply["choices"][0]["message"]["tool_calls"])

# Each token's log probability and the two most likely there.
out = llm("ROMEO:", max_tokens=4, temperature=0, logprobs=2)
print(list(zip(out["choices"][0]["logprobs"]["tokens"], out["choices"][0]["logprobs"]["top_logprobs"])))

# Embeddings (last-token pooling, Euclidean-normalized).
embedder = Llama(path, embedding=True, verbose=False)
vectors = embedder.embed(["To be", "or not to be"])
print(len(vectors), "vectors of", len(vectors[0]))
