"""bitnet: run 1-bit and ternary LLMs from GGUF files on the CPU, with llama-cpp-python's API.

    from bitnet import Llama
    llm = Llama("models/shakespeare.gguf")
    print(llm("ROMEO:", max_tokens=40, temperature=0)["choices"][0]["text"])

Code written for ``llama_cpp.Llama`` moves over by changing the import; see ``Llama``.
"""

from ._bitnet import BitnetError, __version__
from .llama import Llama
from .llama_grammar import LlamaGrammar
from .llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

__all__ = ["Llama", "LlamaGrammar", "LlamaDraftModel", "LlamaPromptLookupDecoding", "BitnetError", "__version__"]
