"""The native half of the package (Rust, pyo3); ``bitnet.Llama`` wraps it."""

from typing import Iterator, List, Optional, Sequence, Tuple

__version__: str

class BitnetError(ValueError):
    """What the bitnet engine refused or failed at, with its message."""

class TokenStream(Iterator[str]):
    """One generation's text, piece by piece; cancelled when dropped or on Ctrl-C."""

    def __iter__(self) -> "TokenStream": ...
    def __next__(self) -> str: ...
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
    ) -> TokenStream: ...
    def chat_prompt(self, messages_json: str) -> Tuple[List[int], str, List[str]]: ...
    def chat_template_name(self) -> str: ...
    @property
    def pooling(self) -> str:
        """The pooling embeddings get: ``none``, ``mean``, ``cls`` or ``last``."""
        ...
    def embed(self, inputs: Sequence[Sequence[int]], normalize: int = 2) -> List[List[List[float]]]: ...
    def close(self) -> None: ...
