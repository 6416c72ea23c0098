"""Chat completions and embeddings in OpenAI's shapes."""

import math

import bitnet

import openai.types as oai
import openai.types.chat as oai_chat
import pytest

MESSAGES = [{"role": "user", "content": "Who art thou?"}]


def test_chat_completion_validates(llm):
    got = llm.create_chat_completion(MESSAGES, max_tokens=16, temperature=0)
    c = oai_chat.ChatCompletion.model_validate(got)
    assert c.choices[0].message.role == "assistant"
    assert c.usage.completion_tokens > 0


def test_chat_stream_validates_and_joins(llm):
    whole = llm.create_chat_completion(MESSAGES, max_tokens=16, temperature=0)
    chunks = list(llm.create_chat_completion(MESSAGES, max_tokens=16, temperature=0, stream=True))
    for chunk in chunks:
        oai_chat.ChatCompletionChunk.model_validate(chunk)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_embedding_validates_and_is_normalized(embedder):
    got = embedder.create_embedding(["To be", "or not to be"])
    r = oai.CreateEmbeddingResponse.model_validate(got)
    assert [d.index for d in r.data] == [0, 1]
    for d in r.data:
        assert len(d.embedding) == embedder.n_embd()
        assert math.isclose(math.fsum(x * x for x in d.embedding), 1.0, rel_tol=1e-4)
    one = embedder.embed("To be")
    assert one == pytest.approx(r.data[0].embedding, rel=1e-5, abs=1e-6)
    raw = embedder.embed("To be", normalize=False)
    assert not math.isclose(math.fsum(x * x for x in raw), 1.0, rel_tol=1e-3)


def test_embedding_needs_embedding_true(llm):
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.create_embedding("x")



def test_pooling_none_gives_a_row_a_token_even_for_one_token():
    from conftest import MODEL

    model = bitnet.Llama(str(MODEL), embedding=True, pooling="none", verbose=False)
    try:
        assert model._model.pooling == "none"
        # A text of one token as embed tokenizes it (the specials the file asks for included).
        one = next(t for t in ["", "R", "O", "A", "\n"] if len(model.tokenize(t.encode())) == 1)
        for text in [one, "To be, or not to be"]:
            n = len(model.tokenize(text.encode()))
            rows = model.embed(text)
            assert len(rows) == n, text
            assert all(isinstance(r, list) and len(r) == model.n_embd() for r in rows), text
    finally:
        model.close()
