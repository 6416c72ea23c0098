"""``LlamaGrammar``: llama-cpp-python's grammar object. A GBNF grammar (llama.cpp's format;
llguidance's Lark dialect after ``%llguidance``) or a JSON Schema that an answer must follow;
``Llama`` compiles it for its model's vocabulary on first use and keeps it."""

import json
import os
from typing import Any, Union

from ._bitnet import check_grammar


class LlamaGrammar:
    """A constraint on an answer. Make one with ``from_string`` (GBNF), ``from_file`` or
    ``from_json_schema``, then pass it as ``grammar=`` to ``create_completion`` or
    ``create_chat_completion``. A grammar's syntax is checked here: a bad one raises
    ``bitnet.BitnetError`` naming the line."""

    def __init__(self, *, _grammar: str, _kind: str = "gbnf") -> None:
        if _kind not in ("gbnf", "json_schema"):
            raise ValueError(f"unknown grammar kind {_kind!r}")
        self._grammar = _grammar
        self._kind = _kind

    @property
    def kind(self) -> str:
        """``"gbnf"`` or ``"json_schema"``."""
        return self._kind

    @property
    def grammar(self) -> str:
        """The grammar's text, or the schema as JSON."""
        return self._grammar

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """A GBNF grammar (its ``root`` rule is the answer)."""
        check_grammar(grammar)
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: Union[str, "os.PathLike[str]"], verbose: bool = True) -> "LlamaGrammar":
        """A GBNF grammar read from a file."""
        with open(file, encoding="utf-8") as f:
            return cls.from_string(f.read(), verbose=verbose)

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Any], verbose: bool = True) -> "LlamaGrammar":
        """An answer valid under a JSON Schema (as JSON text, as llama-cpp-python takes it, or
        as a dict). The schema is enforced as it is, not translated to GBNF first."""
        text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        schema = json.loads(text)
        if not isinstance(schema, (dict, bool)):
            raise ValueError("a JSON schema must be an object (or true/false)")
        return cls(_grammar=text, _kind="json_schema")

    def __repr__(self) -> str:
        return f"LlamaGrammar(kind={self._kind!r}, {len(self._grammar)} characters)"
