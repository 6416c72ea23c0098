//! One forward pass's batch: the caller's [`BatchItem`]s (tokens of several sequences, each
//! after what its sequence holds) laid out token by token (`Batch`): each token's
//! position, the KV block and slot its rows go to, its sequence's block table, and the
//! logits rows wanted. The engine keeps one `Batch` (preallocated for its largest pass),
//! fills it from the items, and hands it to the forward pass as an argument.

use crate::error::CoreError;
use crate::kv::{KvManager, SeqId};

/// Which logits a batch item wants.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prompt chunk that does not end the prompt).
    None,
    /// The last token's.
    Last,
    /// Every token's, in order.
    All,
    /// The last token's final normed hidden state (`[n_embd]`, the output of the model's
    /// last norm: what an embedding pools) instead of its logits; the head is not run for it.
    HiddenLast,
    /// Every token's final normed hidden state, in order (mean pooling, per-token output).
    HiddenAll,
}

impl Logits {
    /// Whether the rows wanted are hidden states rather than logits.
    pub fn is_hidden(self) -> bool {
        matches!(self, Logits::HiddenLast | Logits::HiddenAll)
    }
}

/// Tokens of one sequence to evaluate after what it holds.
#[derive(Clone, Debug)]
pub struct BatchItem<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    pub logits: Logits,
}

/// The batch laid out per token; see the module docs.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) tokens: Vec<u32>,
    /// Position of each token in its sequence.
    pub(super) pos: Vec<usize>,
    /// KV block and row of each token's position.
    pub(super) block: Vec<u32>,
    pub(super) slot: Vec<u32>,
    /// Where each token's sequence's block table starts in `tables` (and its length).
    pub(super) table: Vec<(u32, u32)>,
    /// The block tables of the batch's sequences, back to back.
    pub(super) tables: Vec<u32>,
    /// `(item, token index in item, batch token)` of each logits row wanted, in order.
    pub(super) rows: Vec<(u32, u32, u32)>,
    /// The same for each hidden-state row wanted ([`Logits::HiddenLast`], [`Logits::HiddenAll`]).
    pub(super) hidden_rows: Vec<(u32, u32, u32)>,
    /// Whether each token is a decode row (its item evaluates that one token).
    pub(super) decode: Vec<bool>,
}

impl Batch {
    /// Room for `tokens` tokens and `blocks` block-table entries, allocated now.
    pub(super) fn with_capacity(tokens: usize, blocks: usize) -> Batch {
        Batch {
            tokens: Vec::with_capacity(tokens),
            pos: Vec::with_capacity(tokens),
            block: Vec::with_capacity(tokens),
            slot: Vec::with_capacity(tokens),
            table: Vec::with_capacity(tokens),
            tables: Vec::with_capacity(blocks),
            rows: Vec::with_capacity(tokens),
            hidden_rows: Vec::with_capacity(tokens),
            decode: Vec::with_capacity(tokens),
        }
    }

    /// Lays `items` out token by token (the KV manager has reserved their blocks).
    pub(super) fn lay_out(
        &mut self,
        items: &[BatchItem<'_>],
        kv: &KvManager,
    ) -> Result<(), CoreError> {
        let bt = kv.block_tokens();
        self.tokens.clear();
        self.pos.clear();
        self.block.clear();
        self.slot.clear();
        self.table.clear();
        self.tables.clear();
        self.rows.clear();
        self.hidden_rows.clear();
        self.decode.clear();
        for (i, it) in items.iter().enumerate() {
            let seq = kv.sequence(it.seq)?;
            let start = self.tables.len() as u32;
            self.tables.extend_from_slice(seq.blocks());
            let table = (start, seq.blocks().len() as u32);
            let n_past = seq.len();
            for (j, &t) in it.tokens.iter().enumerate() {
                let pos = n_past + j;
                self.tokens.push(t);
                self.pos.push(pos);
                self.block.push(seq.blocks()[pos / bt]);
                self.slot.push((pos % bt) as u32);
                self.table.push(table);
                self.decode.push(it.tokens.len() == 1);
                let wanted = match it.logits {
                    Logits::None => false,
                    Logits::Last | Logits::HiddenLast => j + 1 == it.tokens.len(),
                    Logits::All | Logits::HiddenAll => true,
                };
                if wanted {
                    let row = (i as u32, j as u32, (self.tokens.len() - 1) as u32);
                    if it.logits.is_hidden() {
                        self.hidden_rows.push(row);
                    } else {
                        self.rows.push(row);
                    }
                }
            }
        }
        Ok(())
    }
}
