"""The text, its train / held-out split, and the byte-level BPE tokenizer."""
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TEXT = os.path.normpath(os.path.join(HERE, "../../testdata/text/tinyshakespeare.txt"))

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
SPECIALS = [BOS, EOS, EOT]  # ids 0, 1, 2


def split(text):
    """(train, held-out): the held-out part is the last 10% of the characters, starting at the
    first paragraph break (a blank line) at or after 90% of the text, so it begins with a
    speaker's name."""
    cut = text.index("\n\n", int(len(text) * 0.9)) + 2
    return text[:cut], text[cut:]


def train_tokenizer(text, vocab_size):
    """Byte-level BPE with GPT-2's pre-tokenizer regex (llama.cpp's `gpt-2` pre-tokenizer),
    the three special tokens first, and a BOS added by the post-processor (as Llama 3's)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)]
    )
    return tok


def load_tokenizer(path):
    return Tokenizer.from_file(path)
