"""The native half of the package (Rust, pyo3); ``bitnet.Llama`` wraps it."""

from typing import Iterator, List, Optional, Sequence, Tuple

__version__: str

class BitnetError(ValueError):
    """What the bitnet engine refused or failed at, with its message."""

def check_grammar(text: str) -> None:
    """Raises ``BitnetError`` naming the line when GBNF ``text`` does not parse."""
    ...

class CompiledConstraint:
    """A grammar or JSON Schema compiled for one model's vocabulary."""

    @property
    def kind(self) -> str: ...

# A token's text, bytes, log probability, and the most likely tokens there.
LogprobEntry = Tuple[str, bytes, float, List[Tuple[str, bytes, float]]]

class TokenStream(Iterator[str]):
    """One generation's text, piece by piece; cancelled when dropped or on Ctrl-C."""

    def __iter__(self) -> "TokenStream": ...
    def __next__(self) -> str: ...
    def take_logprobs(self) -> List[LogprobEntry]:
        """The log probabilities of the tokens handed out since the last call (their texts
        join up to those pieces); empty unless the generation asked for them."""
        ...
    def cancel(self) -> None: ...
    @property
    def finished(self) -> bool: ...
    @property
    def finish_reason(self) -> Optional[str]: ...
    @property
    def prompt_tokens(self) -> Optional[int]: ...
    @property
    def completion_tokens(self) -> Optional[int]: ...

class Model:
    """A model file loaded, with its engine on a thread of its own."""

    def __init__(
        self,
        path: str,
        *,
        n_ctx: int = 0,
        n_threads: int = 0,
        n_batch: int = 256,
        kernel: Optional[str] = None,
        head: str = "auto",
        cache_type_k: str = "f16",
        cache_type_v: str = "f16",
        use_mmap: bool = True,
        use_mlock: bool = False,
        pin_threads: bool = False,
        parallel: int = 64,
        chat_format: Optional[str] = None,
        pooling: Optional[str] = None,
        draft_model: Optional[str] = None,
        lookup_ngram: Optional[int] = None,
        draft_max: int = 16,
        draft_min: int = 0,
        draft_p_min: float = 0.75,
        draft_fixed: bool = False,
        step_delay_ms: int = 0,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    def n_ctx(self) -> int: ...
    def n_vocab(self) -> int: ...
    def n_embd(self) -> int: ...
    def token_bos(self) -> Optional[int]: ...
    def token_eos(self) -> Optional[int]: ...
    def kernel(self) -> str: ...
    def metadata(self) -> List[Tuple[str, str]]: ...
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]: ...
    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes: ...
    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: Optional[int],
        temperature: float,
        top_p: float,
        top_k: int,
        min_p: float,
        repeat_penalty: float,
        frequency_penalty: float,
        presence_penalty: float,
        seed: int,
        stop: Sequence[str],
        logit_bias: Optional[Sequence[Tuple[int, float]]] = None,
        heal: str = "",
        logprobs: Optional[int] = None,
        constraint: Optional[CompiledConstraint] = None,
    ) -> TokenStream: ...
    def compile_grammar(self, text: str) -> CompiledConstraint: ...
    def compile_json_schema(self, schema_json: str) -> CompiledConstraint: ...
    def chat_prompt(
        self,
        messages_json: str,
        tools_json: str = "null",
        tool_choice_json: str = "null",
        parallel_tool_calls: bool = True,
        constrained: bool = False,
    ) -> Tuple[List[int], str, List[str], Optional[CompiledConstraint], bool]:
        """The prompt's tokens, the healed text, the template's stop strings, the tool
        grammar (a required or named call), and whether the reply is read for calls."""
        ...
    def parse_tool_calls(self, text: str) -> Tuple[str, str]:
        """The reply's text outside its calls, and the calls as OpenAI's JSON list."""
        ...
    def chat_template_name(self) -> str: ...
    @property
    def pooling(self) -> str:
        """The pooling embeddings get: ``none``, ``mean``, ``cls`` or ``last``."""
        ...
    def embed(self, inputs: Sequence[Sequence[int]], normalize: int = 2) -> List[List[List[float]]]: ...
    def close(self) -> None: ...
