"""Bad inputs raise Python exceptions with the engine's messages (never a crash), two
threads share one model, and an interrupt cancels a generation and leaves it usable."""

import _thread
import signal
import threading
import time

import pytest

import bitnet
from conftest import MODEL


def test_missing_file_raises(tmp_path):
    with pytest.raises(bitnet.BitnetError, match="nope.gguf"):
        bitnet.Llama(str(tmp_path / "nope.gguf"), verbose=False)


def test_bad_gguf_raises(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ValueError):
        bitnet.Llama(str(bad), verbose=False)


def test_bad_options_raise():
    with pytest.raises(bitnet.BitnetError, match="kernel"):
        bitnet.Llama(str(MODEL), kernel="sse9", verbose=False)
    with pytest.raises(bitnet.BitnetError, match="head"):
        bitnet.Llama(str(MODEL), head="q3", verbose=False)
    with pytest.raises(TypeError):
        bitnet.Llama(str(MODEL), no_such_option=1, verbose=False)


def test_bad_requests_raise(llm):
    with pytest.raises(bitnet.BitnetError):
        llm("ROMEO:", max_tokens=llm.n_ctx() + 10)
    with pytest.raises(bitnet.BitnetError):
        llm("ROMEO:", temperature=-1)
    with pytest.raises(bitnet.BitnetError):
        llm([5000], max_tokens=4)
    with pytest.raises(bitnet.BitnetError):
        llm("", max_tokens=4) if not llm.tokenize(b"") else llm([], max_tokens=4)
    with pytest.raises(bitnet.BitnetError):
        llm.detokenize([10**6])
    with pytest.raises(bitnet.BitnetError):
        llm.tokenize(b"\xff\xfe")
    with pytest.raises(TypeError):
        llm.tokenize("text, not bytes")
    with pytest.raises(bitnet.BitnetError, match="grammar"):
        llm("ROMEO:", grammar="root ::= (")
    with pytest.raises(bitnet.BitnetError, match="grammar"):
        bitnet.LlamaGrammar.from_string("root ::= undefined-rule")
    with pytest.raises(ValueError):
        bitnet.LlamaGrammar.from_json_schema("{not json")
    with pytest.raises(bitnet.BitnetError):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/missing"}}})
    with pytest.raises(ValueError, match="response_format"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "xml"})
    with pytest.raises(bitnet.BitnetError, match="tool_choice"):
        llm.create_chat_completion(
            [{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}],
            tool_choice={"type": "function", "function": {"name": "b"}},
        )
    with pytest.raises(bitnet.BitnetError, match="tools"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], tools=[{"type": "function"}])
    with pytest.raises(ValueError, match="top_logprobs"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], logprobs=True, top_logprobs=21)
    with pytest.raises(ValueError, match="logprobs"):
        llm("ROMEO:", logprobs=-1)
    with pytest.raises(NotImplementedError):
        llm("ROMEO:", logprobs=2, echo=True)
    with pytest.raises(bitnet.BitnetError):
        llm.create_chat_completion([])
    # Still usable after all of that.
    assert llm("ROMEO:", max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4


def test_two_threads_at_once(llm):
    want = llm("ROMEO:", max_tokens=30, temperature=0)["choices"][0]["text"]
    results = [None, None]
    errors = []

    def run(i):
        try:
            results[i] = llm("ROMEO:", max_tokens=30, temperature=0)["choices"][0]["text"]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert results == [want, want]


def test_interrupt_cancels_and_leaves_the_model_usable():
    # Each engine step slowed to 20 ms, so 200 tokens would take 4 s; Ctrl-C (here
    # interrupt_main, which raises KeyboardInterrupt in the main thread as SIGINT does)
    # arrives while the call waits on the engine and stops it between tokens.
    llm = bitnet.Llama(str(MODEL), verbose=False, _step_delay_ms=20)
    # A process started in the background by a non-interactive shell inherits SIGINT
    # ignored, and interrupt_main then does nothing: Python's own handler, as a terminal
    # session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.3, _thread.interrupt_main)
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            llm("ROMEO:", max_tokens=200, temperature=0)
        assert time.monotonic() - t0 < 3.5  # the whole answer would take 4 s
        # The same model answers the next call in full.
        assert llm("ROMEO:", max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4
    finally:
        signal.signal(signal.SIGINT, previous)
        llm.close()


def test_bad_speculation_raises():
    with pytest.raises(bitnet.BitnetError, match="draft_max"):
        bitnet.Llama(str(MODEL), draft_max=8, verbose=False)
    with pytest.raises(bitnet.BitnetError, match="lookup_ngram"):
        bitnet.Llama(str(MODEL), lookup_ngram=0, verbose=False)
    with pytest.raises(bitnet.BitnetError, match="draft_max"):
        bitnet.Llama(str(MODEL), lookup_ngram=2, draft_max=4096, verbose=False)
    with pytest.raises(bitnet.BitnetError, match="draft model"):
        bitnet.Llama(str(MODEL), draft_model="/no/such/draft.gguf", verbose=False)
    with pytest.raises(ValueError):
        bitnet.Llama(str(MODEL), draft_model=bitnet.LlamaPromptLookupDecoding(), lookup_ngram=3, verbose=False)
