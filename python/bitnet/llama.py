"""``Llama``: llama-cpp-python's ``llama_cpp.Llama``, over the bitnet engine.

The engine runs on a thread of its own (``bitnet._bitnet.Model``); every call here submits a
request to it and waits with the interpreter lock released, so several Python threads
calling one ``Llama`` are decoded together (continuous batching), and Ctrl-C stops a
generation between tokens, raising ``KeyboardInterrupt`` and leaving the object usable.
"""

import json
import os
import random
import sys
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _responses
from ._bitnet import CompiledConstraint, Model, TokenStream
from .llama_grammar import LlamaGrammar
from .llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding
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


# OpenAI's limit on a chat's top_logprobs (the completion's logprobs is held to the vocabulary).
MAX_TOP_LOGPROBS = 20
# Grammars and schemas compiled for the model, kept for the next call that gives them.
COMPILED_KEPT = 32


def _response_format_schema(response_format: Any) -> Optional[Any]:
    """OpenAI's ``response_format`` (and llama-cpp-python's ``schema`` beside
    ``json_object``) as the JSON Schema the answer must follow; None for text."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
        raise ValueError("response_format must be a dict with a 'type'")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return {"type": "object"} if schema is None else schema
    if kind == "json_schema":
        js = response_format.get("json_schema")
        if not isinstance(js, dict):
            raise ValueError("response_format.json_schema must be a dict with 'name' and 'schema'")
        schema = js.get("schema")
        return {"type": "object"} if schema is None else schema
    raise ValueError(f"response_format.type {kind!r} is not one of 'text', 'json_object', 'json_schema'")


def _completion_logprobs(entries: List[Tuple[str, bytes, float, list]], offset: int) -> Dict[str, Any]:
    """The legacy completion's ``logprobs`` for these tokens, their text starting at
    ``offset`` of the answer."""
    offsets = []
    for text, _, _, _ in entries:
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": [e[0] for e in entries],
        "text_offset": offsets,
        "token_logprobs": [e[2] for e in entries],
        "top_logprobs": [{t: lp for t, _, lp in e[3]} for e in entries],
    }


def _chat_logprobs(entries: List[Tuple[str, bytes, float, list]]) -> Dict[str, Any]:
    """A chat choice's ``logprobs``: each token with its bytes and its alternatives."""
    return {
        "content": [
            {
                "token": text,
                "logprob": lp,
                "bytes": list(raw),
                "top_logprobs": [{"token": t, "logprob": l, "bytes": list(b)} for t, b, l in top],
            }
            for text, raw, lp, top in entries
        ],
        "refusal": None,
    }


def _collect(token_stream: TokenStream) -> Tuple[str, list]:
    """A whole answer: its text, and its tokens' log probabilities (if it asked for them)."""
    pieces = []
    entries: list = []
    for piece in token_stream:
        pieces.append(piece)
        entries.extend(token_stream.take_logprobs())
    return "".join(pieces), entries


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

    Speculative decoding: ``draft_model`` is a ``LlamaPromptLookupDecoding`` (prompt lookup,
    as in llama-cpp-python) or the path of a smaller GGUF with the same vocabulary (the
    CLI's ``--model-draft``); ``lookup_ngram``, ``draft_max``, ``draft_min``,
    ``draft_p_min`` and ``draft_fixed`` are the CLI's flags of the same names. Output is
    unchanged by it.
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
        draft_model: Union[None, str, "os.PathLike[str]", LlamaDraftModel] = None,
        lookup_ngram: Optional[int] = None,
        draft_max: Optional[int] = None,
        draft_min: int = 0,
        draft_p_min: float = 0.75,
        draft_fixed: bool = False,
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
        draft_path: Optional[str] = None
        if isinstance(draft_model, LlamaPromptLookupDecoding):
            if lookup_ngram is not None:
                raise ValueError("give draft_model=LlamaPromptLookupDecoding(...) or lookup_ngram, not both")
            lookup_ngram = draft_model.max_ngram_size
            draft_max = draft_model.num_pred_tokens if draft_max is None else draft_max
        elif isinstance(draft_model, LlamaDraftModel):
            raise NotImplementedError(
                "bitnet.Llama drafts with LlamaPromptLookupDecoding or a draft GGUF's path, "
                f"not a {type(draft_model).__name__}"
            )
        elif draft_model is not None:
            draft_path = os.fspath(draft_model)
        speculation: Dict[str, Any] = {}
        if draft_max is not None:
            speculation["draft_max"] = draft_max
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
            draft_model=draft_path,
            lookup_ngram=lookup_ngram,
            draft_min=draft_min,
            draft_p_min=draft_p_min,
            draft_fixed=draft_fixed,
            step_delay_ms=step_delay_ms,
            **speculation,
        )
        self.metadata: Dict[str, str] = dict(self._model.metadata())
        self.chat_format = chat_format
        self._seed_lock = threading.Lock()
        self._compiled: "OrderedDict[Tuple[str, str], CompiledConstraint]" = OrderedDict()
        self._compiled_lock = threading.Lock()
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
        logprobs: Optional[int] = None,
        constraint: Optional[CompiledConstraint] = None,
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
            logprobs=logprobs,
            constraint=constraint,
        )

    def _prompt_tokens(self, prompt: Union[str, List[int]]) -> List[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        return list(prompt)

    def _constraint(self, kind: str, text: str) -> CompiledConstraint:
        """``text`` (a GBNF grammar, or a JSON Schema as JSON) compiled for the model, from
        the cache when an earlier call gave the same."""
        key = (kind, text)
        with self._compiled_lock:
            found = self._compiled.get(key)
            if found is not None:
                self._compiled.move_to_end(key)
                return found
        compiled = self._model.compile_grammar(text) if kind == "gbnf" else self._model.compile_json_schema(text)
        with self._compiled_lock:
            self._compiled[key] = compiled
            while len(self._compiled) > COMPILED_KEPT:
                self._compiled.popitem(last=False)
        return compiled

    def _grammar_constraint(self, grammar: Union[None, str, LlamaGrammar]) -> Optional[CompiledConstraint]:
        """``grammar=``: a ``LlamaGrammar``, or GBNF text."""
        if grammar is None:
            return None
        if isinstance(grammar, str):
            grammar = LlamaGrammar.from_string(grammar)
        if not isinstance(grammar, LlamaGrammar):
            raise TypeError(f"grammar must be a LlamaGrammar or GBNF text, not {type(grammar).__name__}")
        return self._constraint(grammar.kind, grammar.grammar)

    def _logprobs_count(self, count: Optional[int], name: str, most: int) -> Optional[int]:
        if count is None:
            return None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0 or count > most:
            raise ValueError(f"{name} must be an integer from 0 to {most}, not {count!r}")
        return count

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
        grammar: Union[None, str, LlamaGrammar] = None,
    ) -> Union[CreateCompletionResponse, Iterator[CreateCompletionStreamResponse]]:
        """Continues ``prompt`` (text, or token ids): OpenAI's completion dict, or with
        ``stream=True`` an iterator of its chunks. ``temperature=0`` is greedy. ``stop``
        strings end the answer and are left out of it. ``max_tokens`` None or <= 0
        generates until the context is full; one past the context raises. ``logprobs=k``:
        each token's log probability and the ``k`` most likely there (OpenAI's legacy
        ``logprobs``). ``grammar``: a ``LlamaGrammar`` (or GBNF text) the answer follows."""
        _refuse("suffix", suffix)
        if typical_p != 1.0:
            raise NotImplementedError("bitnet.Llama does not support typical_p yet")
        top = self._logprobs_count(logprobs, "logprobs", self.n_vocab())
        if top is not None and echo:
            raise NotImplementedError(
                "bitnet.Llama does not give the prompt's log probabilities (echo=True with logprobs)"
            )
        constraint = self._grammar_constraint(grammar)
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
            logprobs=top,
            constraint=constraint,
        )
        id = _responses.new_id("cmpl")
        created = _responses.now()
        name = model or self.model_path
        prefix = prompt if isinstance(prompt, str) else self.detokenize(tokens).decode("utf-8", "replace")
        if stream:
            return self._completion_chunks(token_stream, id, created, name, prefix if echo else "", top is not None)
        text, entries = _collect(token_stream)
        if echo:
            text = prefix + text
        use = _responses.usage(token_stream.prompt_tokens or len(tokens), token_stream.completion_tokens or 0)
        lp = _completion_logprobs(entries, 0) if top is not None else None
        return _responses.completion(id, created, name, text, _finish_reason(token_stream), use, lp)

    def _completion_chunks(
        self, token_stream: TokenStream, id: str, created: int, name: str, echo: str, with_logprobs: bool
    ) -> Iterator[CreateCompletionStreamResponse]:
        try:
            if echo:
                yield _responses.completion_chunk(id, created, name, echo, None)
            offset = 0
            for piece in token_stream:
                lp = None
                if with_logprobs:
                    lp = _completion_logprobs(token_stream.take_logprobs(), offset)
                    offset += len(piece)
                yield _responses.completion_chunk(id, created, name, piece, None, lp)
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
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Union[None, str, Dict[str, Any]] = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        grammar: Union[None, str, LlamaGrammar] = None,
        parallel_tool_calls: bool = True,
    ) -> Union[CreateChatCompletionResponse, Iterator[CreateChatCompletionStreamResponse]]:
        """The assistant's reply to ``messages`` (OpenAI's message dicts), rendered with the
        model's chat template (or ``chat_format``): OpenAI's chat completion dict, or with
        ``stream=True`` an iterator of its chunks.

        ``response_format`` (``{"type": "json_object"}``, with llama-cpp-python's
        ``"schema"`` beside it, or OpenAI's ``json_schema``) or ``grammar`` constrains the
        reply. ``tools`` and ``tool_choice`` as OpenAI's: a ``"required"`` or named choice
        is enforced by a grammar, and the calls come back as ``message.tool_calls`` with
        ``finish_reason`` ``"tool_calls"``. ``logprobs=True`` (with ``top_logprobs`` up to
        20) gives each token's log probability."""
        for name, value in [("functions", functions), ("function_call", function_call)]:
            if value is not None:
                raise NotImplementedError(f"bitnet.Llama does not support {name}: use tools and tool_choice")
        if typical_p != 1.0:
            raise NotImplementedError("bitnet.Llama does not support typical_p yet")
        if top_logprobs and not logprobs:
            raise ValueError("top_logprobs needs logprobs=True")
        top = self._logprobs_count(top_logprobs or 0, "top_logprobs", MAX_TOP_LOGPROBS) if logprobs else None
        schema = _response_format_schema(response_format)
        if schema is not None and grammar is not None:
            raise ValueError("give response_format or grammar, not both: each constrains the whole reply")
        constraint = self._grammar_constraint(grammar)
        if schema is not None:
            constraint = self._constraint("json_schema", json.dumps(schema))
        tokens, heal, template_stop, tool_constraint, read_calls = self._model.chat_prompt(
            json.dumps(list(messages)),
            tools_json=json.dumps(tools),
            tool_choice_json=json.dumps(tool_choice),
            parallel_tool_calls=bool(parallel_tool_calls),
            constrained=constraint is not None,
        )
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
            logprobs=top,
            constraint=constraint or tool_constraint,
        )
        id = _responses.new_id("chatcmpl")
        created = _responses.now()
        name = model or self.model_path
        if stream:
            return self._chat_chunks(token_stream, id, created, name, top is not None, read_calls)
        text, entries = _collect(token_stream)
        use = _responses.usage(token_stream.prompt_tokens or len(tokens), token_stream.completion_tokens or 0)
        lp = _chat_logprobs(entries) if top is not None else None
        reason = _finish_reason(token_stream)
        message: Dict[str, Any] = {"role": "assistant", "content": text}
        if read_calls:
            content, calls = self._split_calls(text)
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
                reason = "tool_calls" if reason == "stop" else reason
        return _responses.chat_completion(id, created, name, message, reason, use, lp)

    def _split_calls(self, text: str) -> Tuple[Optional[str], List[Dict[str, Any]]]:
        """A reply read for tool calls: its text (None when it is only calls) and the calls
        in OpenAI's shape."""
        content, calls_json = self._model.parse_tool_calls(text)
        calls = json.loads(calls_json)
        if not calls:
            return content, []
        return (content.strip() or None), calls

    def _chat_chunks(
        self,
        token_stream: TokenStream,
        id: str,
        created: int,
        name: str,
        with_logprobs: bool,
        read_calls: bool,
    ) -> Iterator[CreateChatCompletionStreamResponse]:
        try:
            yield _responses.chat_chunk(id, created, name, {"role": "assistant", "content": ""}, None)
            if read_calls:
                # Calls are known only once the reply is whole (as the server streams them):
                # the text is held, then sent as calls or as content.
                yield from self._chat_tool_chunks(token_stream, id, created, name, with_logprobs)
                return
            for piece in token_stream:
                lp = _chat_logprobs(token_stream.take_logprobs()) if with_logprobs else None
                yield _responses.chat_chunk(id, created, name, {"content": piece}, None, lp)
            yield _responses.chat_chunk(id, created, name, {}, _finish_reason(token_stream))
        finally:
            token_stream.cancel()

    def _chat_tool_chunks(
        self, token_stream: TokenStream, id: str, created: int, name: str, with_logprobs: bool
    ) -> Iterator[CreateChatCompletionStreamResponse]:
        text, entries = _collect(token_stream)
        reason = _finish_reason(token_stream)
        content, calls = self._split_calls(text)
        if not calls:
            if content:
                lp = _chat_logprobs(entries) if with_logprobs else None
                yield _responses.chat_chunk(id, created, name, {"content": content}, None, lp)
            yield _responses.chat_chunk(id, created, name, {}, reason)
            return
        if content:
            yield _responses.chat_chunk(id, created, name, {"content": content}, None)
        for index, call in enumerate(calls):
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield _responses.chat_chunk(id, created, name, {"tool_calls": [first]}, None)
            arguments = call["function"]["arguments"]
            yield _responses.chat_chunk(
                id, created, name, {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}, None
            )
        yield _responses.chat_chunk(id, created, name, {}, "tool_calls" if reason == "stop" else reason)

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
