"""Speculative decoding's draft sources, as llama-cpp-python names them: pass one as
``Llama(..., draft_model=...)``. Output is unchanged by speculation (greedy token for token,
sampled in the same distribution); only its speed changes."""


class LlamaDraftModel:
    """A source of draft tokens."""


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Prompt lookup, no second model: the tokens that followed the most recent earlier
    occurrence of the last ``max_ngram_size`` tokens (down to 2) in the prompt and the
    answer are proposed, ``num_pred_tokens`` at most, and verified in one pass."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be at least 1")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens
