"""OpenAI's response shapes, built from what the engine reported: one place that knows the
keys, so ``Llama``'s methods only say what happened. Each builder returns a plain dict, as
llama-cpp-python does."""

import time
import uuid
from typing import List, Optional, Union

from .llama_types import (
    CompletionUsage,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    CreateCompletionResponse,
    CreateEmbeddingResponse,
)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> CompletionUsage:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: Optional[str],
    use: CompletionUsage,
    logprobs: Optional[dict] = None,
) -> CreateCompletionResponse:
    """A whole answer: a chunk's shape with its usage."""
    return {**completion_chunk(id, created, model, text, finish_reason, logprobs), "usage": use}


def completion_chunk(
    id: str, created: int, model: str, text: str, finish_reason: Optional[str], logprobs: Optional[dict] = None
) -> CreateCompletionResponse:
    return {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def chat_completion(
    id: str,
    created: int,
    model: str,
    message: dict,
    finish_reason: Optional[str],
    use: CompletionUsage,
    logprobs: Optional[dict] = None,
) -> CreateChatCompletionResponse:
    """A whole reply; ``message`` is the assistant's (``content``, ``tool_calls``)."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}],
        "usage": use,
    }


def chat_chunk(
    id: str,
    created: int,
    model: str,
    delta: dict,
    finish_reason: Optional[str],
    logprobs: Optional[dict] = None,
) -> CreateChatCompletionStreamResponse:
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def embeddings(
    model: str, vectors: List[Union[List[float], List[List[float]]]], prompt_tokens: int
) -> CreateEmbeddingResponse:
    return {
        "object": "list",
        "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
