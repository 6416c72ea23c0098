"""The dicts ``Llama`` returns, as TypedDicts: OpenAI's completion, chat and embedding shapes,
the same as llama-cpp-python's ``llama_cpp.llama_types``."""

import sys
from typing import Any, Dict, List, Optional, Union

if sys.version_info >= (3, 11):
    from typing import Literal, NotRequired, TypedDict
else:  # Python 3.9 and 3.10: Literal and TypedDict are there, NotRequired is not.
    from typing import Literal, TypedDict

    NotRequired = Optional  # type: ignore[assignment]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[Any]
    finish_reason: Optional[Literal["stop", "length"]]


class CreateCompletionResponse(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: NotRequired[CompletionUsage]


CreateCompletionStreamResponse = CreateCompletionResponse


class ChatCompletionResponseMessage(TypedDict):
    role: Literal["assistant"]
    content: Optional[str]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[Any]
    finish_reason: Optional[str]


class CreateChatCompletionResponse(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionResponseChoice]
    usage: CompletionUsage


class ChatCompletionStreamResponseDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: Optional[str]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: ChatCompletionStreamResponseDelta
    logprobs: Optional[Any]
    finish_reason: Optional[str]


class CreateChatCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatCompletionStreamResponseChoice]


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class Embedding(TypedDict):
    index: int
    object: Literal["embedding"]
    embedding: Union[List[float], List[List[float]]]


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: List[Embedding]
    usage: EmbeddingUsage


ChatCompletionRequestMessage = Dict[str, Any]
