//! A model's vocabulary as llguidance sees it: each token's bytes in a trie, control tokens
//! under their names (so a Lark grammar can ask for `<|python_tag|>`), and the
//! end-of-generation tokens that close a constrained output.

use std::sync::Arc;

use llguidance::ParserFactory;
use llguidance::api::ParserLimits;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use super::error::ConstraintError;
use crate::tokenizer::Tokenizer;

/// See the module docs. Built once per model ([`crate::Model::constraint_vocab`]).
pub struct ConstraintVocab {
    factory: ParserFactory,
    n_vocab: usize,
    eog: Vec<u32>,
}

impl std::fmt::Debug for ConstraintVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintVocab")
            .field("n_vocab", &self.n_vocab)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

/// The trie's own greedy tokenization: llguidance asks for it only to turn forced bytes into
/// tokens, and a byte string that is not valid UTF-8 must tokenize too.
struct TrieEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        // Greedy longest match is not how BPE or SentencePiece split text.
        false
    }
}

impl ConstraintVocab {
    /// The vocabulary of `tok` for logit rows of `n_vocab` entries (a model's output may be
    /// padded past its tokenizer: those ids are never allowed).
    pub fn new(tok: &Tokenizer, n_vocab: usize) -> Result<ConstraintVocab, ConstraintError> {
        let mut eog: Vec<u32> = tok
            .eog_ids()
            .iter()
            .copied()
            .filter(|&t| (t as usize) < n_vocab)
            .collect();
        eog.sort_unstable();
        eog.dedup();
        let Some(&first_eog) = eog.first() else {
            return Err(ConstraintError::Vocabulary(
                "an end-of-generation token, and the model's vocabulary has none".into(),
            ));
        };
        let n = u32::try_from(n_vocab).map_err(|_| {
            ConstraintError::Vocabulary(format!("a vocabulary under 2^32, not {n_vocab}"))
        })?;
        let words: Vec<Vec<u8>> = (0..n)
            .map(|id| {
                if (id as usize) >= tok.n_vocab() {
                    return Vec::new();
                }
                if tok.is_control(id) {
                    // Control tokens are matched by name only (`<|eot_id|>`), never as text.
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_text(id).unwrap_or("").as_bytes());
                    return w;
                }
                tok.token_to_piece(id).to_vec()
            })
            .collect();
        let mut info = TokRxInfo::new(n, tok.eos_id().filter(|&t| t < n).unwrap_or(first_eog));
        info.tok_bos = tok.bos_id().filter(|&t| t < n);
        info.tok_end_of_turn = tok.eot_id().filter(|&t| t < n);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(TrieEnv { trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| {
            ConstraintError::Vocabulary(format!("a vocabulary llguidance accepts: {e}"))
        })?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(ConstraintVocab {
            factory,
            n_vocab,
            eog,
        })
    }

    /// Entries of a logits row.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The end-of-generation tokens (sorted): allowed exactly when the output may end.
    pub fn eog(&self) -> &[u32] {
        &self.eog
    }

    pub(super) fn factory(&self) -> &ParserFactory {
        &self.factory
    }

    /// Each token's bytes (a control token's name after [`TokTrie::SPECIAL_TOKEN_MARKER`]).
    pub(super) fn trie(&self) -> &TokTrie {
        self.factory.tok_env().tok_trie()
    }
}

/// llguidance's limits, with errors kept short: a request's grammar is untrusted input, and
/// the limits bound the work of one mask whatever it asks for.
fn limits() -> ParserLimits {
    ParserLimits {
        verbose_errors: false,
        ..ParserLimits::default()
    }
}
