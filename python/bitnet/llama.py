"""``Llama``: llama-cpp-python's ``llama_cpp.Llama``, over the bitnet engine.

The engine runs on a thread of its own (``bitnet._bitnet.Model``); every call here submits a
request to it and waits with the interpreter lock released, so several Python threads
calling one ``Llama`` are decoded together (continuous batching), and Ctrl-C stops a
generation between tokens, raising ``KeyboardInterrupt`` and leaving the object usable.
"""

import json
import random
import sys
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _responses
from ._bitnet import Model, TokenStream
from .llama_types import (
    ChatCompletionRequestMessage,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    CreateCompletionResponse,
    CreateCompletionStreamResponse,
    CreateEmbeddingResponse,
)

# llama.cpp's LLAMA_DEFAULT_SEED: "pick a random seed", as -1 is.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF


def _finish_reason(stream: TokenStream) -> str:
    # "cancelled" only reaches here when another thread closed the model mid-answer.
    reason = stream.finish_reason
    return "length" if reason == "length" else "stop"


def _stop_list(stop: Union[None, str, Sequence[str]]) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    return list(stop)


def _refuse(name: str, value: Any) -> None:
    """Options llama-cpp-python has and this package does not (yet): refused out loud, so
    code relying on them fails instead of silently doing something else."""
    if value is not None and value is not False:
        raise NotImplementedError(f"bitnet.Llama does not support {name} yet")


class Llama:
    """A GGUF model, with llama-cpp-python's methods.

    ``n_ctx=0`` takes the model's training context (at most 4096); ``n_threads=None`` the
    physical cores; ``kernel`` forces a kernel set (``"scalar"``, ``"avx2"``, ...). The
    CLI's model flags are keyword arguments with its names: ``head`` (``auto``, ``native``,
    ``q8``, ``q6k``, ``q4_0``), ``cache_type_k``/``cache_type_v``, ``use_mmap``,
    ``use_mlock``, ``pin_threads``, ``parallel`` (answers decoded together at most),
    ``pooling`` (embeddings). ``chat_format`` names a built-in chat template (or a Jinja
    file) instead of the file's own. Errors raise ``bitnet.BitnetError`` (a ``ValueError``)
    with the engine's message.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 0,
        n_threads: Optional[int] = None,
        n_batch: int = 256,
        seed: int = LLAMA_DEFAULT_SEED,
        kernel: Optional[str] = None,
        chat_format: Optional[str] = None,
        embedding: bool = False,
        verbose: bool = True,
        head: str = "auto",
        cache_type_k: str = "f16",
        cache_type_v: str = "f16",
        use_mmap: bool = True,
        use_mlock: bool = False,
        pin_threads: bool = False,
        parallel: int = 64,
        pooling: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        # llama-cpp-python's GPU and rope options have no meaning here; anything else
        # unknown is a mistake worth hearing about.
        ignored = {"n_gpu_layers", "main_gpu", "tensor_split", "vocab_only", "logits_all", "offload_kqv", "flash_attn"}
        # _step_delay_ms: sleep after every engine step (tests slow the tiny model down).
        step_delay_ms = int(kwargs.pop("_step_delay_ms", 0))
        unknown = sorted(set(kwargs) - ignored)
        if unknown:
            raise TypeError(f"Llama() got unexpected keyword arguments: {', '.join(unknown)}")
        if n_ctx < 0 or n_batch < 0 or (n_threads is not None and n_threads < 0):
            raise ValueError("n_ctx, n_batch and n_threads must not be negative")
        self.model_path = str(model_path)
        self.verbose = verbose
        self.embedding = embedding
        self._model = Model(
            self.model_path,
            n_ctx=n_ctx,
            n_threads=n_threads or 0,
            n_batch=n_batch,
            kernel=kernel,
            head=head,
            cache_type_k=cache_type_k,
            cache_type_v=cache_type_v,
            use_mmap=use_mmap,
            use_mlock=use_mlock,
            pin_threads=pin_threads,
            parallel=parallel,
            chat_format=chat_format,
            pooling=pooling,
            step_delay_ms=step_delay_ms,
        )
        self.metadata: Dict[str, str] = dict(self._model.metadata())
        self.chat_format = chat_format
        self._seed_lock = threading.Lock()
        self.set_seed(seed)
        if verbose:
            print(
                f"bitnet: {self.model_path}: {self._model.kernel()} kernels, n_ctx {self.n_ctx()}",
                file=sys.stderr,
            )

    # -- the model -------------------------------------------------------------------------

    def n_ctx(self) -> int:
        """Positions one sequence holds: prompt and answer together."""
        return self._model.n_ctx()

    def n_vocab(self) -> int:
        return self._model.n_vocab()

    def n_embd(self) -> int:
        return self._model.n_embd()

    def token_bos(self) -> int:
        bos = self._model.token_bos()
        return -1 if bos is None else bos

    def token_eos(self) -> int:
        eos = self._model.token_eos()
        return -1 if eos is None else eos

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of UTF-8 ``text``; ``special`` recognises control tokens in it."""
        if isinstance(text, str):
            raise TypeError("tokenize takes bytes (text.encode('utf-8')), as llama-cpp-python does")
        return self._model.tokenize(bytes(text), add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of ``tokens``; control tokens are left out unless ``special``."""
        return self._model.detokenize(list(tokens), special)

    def set_seed(self, seed: int) -> None:
        """Seeds the calls that give no ``seed`` of their own (-1 or LLAMA_DEFAULT_SEED: random)."""
        if seed is None or seed < 0 or seed == LLAMA_DEFAULT_SEED:
            seed = random.SystemRandom().getrandbits(63)
        with self._seed_lock:
            self._rng = random.Random(seed)

    def reset(self) -> None:
        """Kept for llama-cpp-python's callers: each call here is a request of its own and
        carries no state from the previous one, so there is nothing to reset (the engine's
        prefix cache only ever saves work)."""

    def close(self) -> None:
        """Cancels what runs and stops the engine thread; the object is unusable after."""
        self._model.close()

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- completions -----------------------------------------------------------------------

    def _next_seed(self, seed: Optional[int]) -> int:
        if seed is not None:
            return seed & 0xFFFF_FFFF_FFFF_FFFF
        with self._seed_lock:
            return self._rng.getrandbits(64)

    def _start(
        self,
        prompt_tokens: List[int],
        *,
        max_tokens: Optional[int],
        temperature: float,
        top_p: float,
        top_k: int,
        min_p: float,
        repeat_penalty: float,
        frequency_penalty: float,
        presence_penalty: float,
        stop: Union[None, str, Sequence[str]],
        seed: Optional[int],
        logit_bias: Optional[Dict[int, float]],
        heal: str = "",
        extra_stop: Sequence[str] = (),
    ) -> TokenStream:
        if max_tokens is not None and max_tokens <= 0:
            max_tokens = None  # llama-cpp-python: until the context is full
        if top_k < 0:
            top_k = 0
        return self._model.generate(
            prompt_tokens,
            max_tokens=max_tokens,
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=int(top_k),
            min_p=float(min_p),
            repeat_penalty=float(repeat_penalty),
            frequency_penalty=float(frequency_penalty),
            presence_penalty=float(presence_penalty),
            seed=self._next_seed(seed),
            stop=_stop_list(stop) + [s for s in extra_stop if s not in _stop_list(stop)],
            logit_bias=None if not logit_bias else [(int(t), float(b)) for t, b in logit_bias.items()],
            heal=heal,
        )

    def _prompt_tokens(self, prompt: Union[str, List[int]]) -> List[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        return list(prompt)

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Union[None, str, List[str]] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        model: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        grammar: Any = None,
    ) -> Union[CreateCompletionResponse, Iterator[CreateCompletionStreamResponse]]:
        """Continues ``prompt`` (text, or token ids): OpenAI's completion dict, or with
        ``stream=True`` an iterator of its chunks. ``temperature=0`` is greedy. ``stop``
        strings end the answer and are left out of it. ``max_tokens`` None or <= 0
        generates until the context is full; one past the context raises."""
        _refuse("suffix", suffix)
        _refuse("logprobs", logprobs)
        _refuse("grammar", grammar)
        if typical_p != 1.0:
            raise NotImplementedError("bitnet.Llama does not support typical_p yet")
        tokens = self._prompt_tokens(prompt)
        token_stream = self._start(
            tokens,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            stop=stop,
            seed=seed,
            logit_bias=logit_bias,
        )
        id = _responses.new_id("cmpl")
        created = _responses.now()
        name = model or self.model_path
        prefix = prompt if isinstance(prompt, str) else self.detokenize(tokens).decode("utf-8", "replace")
        if stream:
            return self._completion_chunks(token_stream, id, created, name, prefix if echo else "")
        text = "".join(token_stream)
        if echo:
            text = prefix + text
        use = _responses.usage(token_stream.prompt_tokens or len(tokens), token_stream.completion_tokens or 0)
        return _responses.completion(id, created, name, text, _finish_reason(token_stream), use)

    def _completion_chunks(
        self, token_stream: TokenStream, id: str, created: int, name: str, echo: str
    ) -> Iterator[CreateCompletionStreamResponse]:
        try:
            if echo:
                yield _responses.completion_chunk(id, created, name, echo, None)
            for piece in token_stream:
                yield _responses.completion_chunk(id, created, name, piece, None)
            yield _responses.completion_chunk(id, created, name, "", _finish_reason(token_stream))
        finally:
            token_stream.cancel()  # the caller stopped early: free the engine's sequence

    __call__ = create_completion

    # -- chat ------------------------------------------------------------------------------

    def create_chat_completion(
        self,
        messages: List[ChatCompletionRequestMessage],
        functions: Any = None,
        function_call: Any = None,
        tools: Any = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        response_format: Any = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        grammar: Any = None,
    ) -> Union[CreateChatCompletionResponse, Iterator[CreateChatCompletionStreamResponse]]:
        """The assistant's reply to ``messages`` (OpenAI's message dicts), rendered with the
        model's chat template (or ``chat_format``): OpenAI's chat completion dict, or with
        ``stream=True`` an iterator of its chunks."""
        for name, value in [
            ("functions", functions),
            ("function_call", function_call),
            ("tools", tools),
            ("tool_choice", tool_choice),
            ("response_format", response_format),
            ("logprobs", logprobs),
            ("top_logprobs", top_logprobs),
            ("grammar", grammar),
        ]:
            _refuse(name, value)
        if typical_p != 1.0:
            raise NotImplementedError("bitnet.Llama does not support typical_p yet")
        tokens, heal, template_stop = self._model.chat_prompt(json.dumps(list(messages)))
        token_stream = self._start(
            tokens,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            stop=stop,
            seed=seed,
            logit_bias=logit_bias,
            heal=heal,
            extra_stop=template_stop,
        )
        id = _responses.new_id("chatcmpl")
        created = _responses.now()
        name = model or self.model_path
        if stream:
            return self._chat_chunks(token_stream, id, created, name)
        text = "".join(token_stream)
        use = _responses.usage(token_stream.prompt_tokens or len(tokens), token_stream.completion_tokens or 0)
        return _responses.chat_completion(id, created, name, text, _finish_reason(token_stream), use)

    def _chat_chunks(
        self, token_stream: TokenStream, id: str, created: int, name: str
    ) -> Iterator[CreateChatCompletionStreamResponse]:
        try:
            yield _responses.chat_chunk(id, created, name, {"role": "assistant", "content": ""}, None)
            for piece in token_stream:
                yield _responses.chat_chunk(id, created, name, {"content": piece}, None)
            yield _responses.chat_chunk(id, created, name, {}, _finish_reason(token_stream))
        finally:
            token_stream.cancel()

    # -- embeddings ------------------------------------------------------------------------

    def _pooled(self, vectors: List[List[List[float]]]) -> List[Any]:
        """Each input's vector, or its rows (one a token) under ``pooling="none"``, whatever
        the input's length: a one-token input still gets a list of rows."""
        if self._model.pooling == "none":
            return vectors
        return [v[0] for v in vectors]

    def _embed_tokens(self, input: Union[str, List[str]]) -> List[List[int]]:
        if not self.embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        texts = [input] if isinstance(input, str) else list(input)
        return [self.tokenize(t.encode("utf-8")) for t in texts]

    def embed(
        self, input: Union[str, List[str]], normalize: bool = True, truncate: bool = True, return_count: bool = False
    ) -> Any:
        """The embedding of ``input`` (a vector, or one a token under ``pooling="none"``),
        or of each string of a list; ``normalize``: Euclidean norm 1."""
        inputs = self._embed_tokens(input)
        vectors = self._model.embed(inputs, 2 if normalize else -1)
        out = self._pooled(vectors)
        result = out[0] if isinstance(input, str) else out
        if return_count:
            return result, sum(len(t) for t in inputs)
        return result

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> CreateEmbeddingResponse:
        """OpenAI's embeddings response for ``input`` (a string or a list of them)."""
        inputs = self._embed_tokens(input)
        vectors = self._model.embed(inputs, 2)
        out = self._pooled(vectors)
        return _responses.embeddings(model or self.model_path, out, sum(len(t) for t in inputs))
