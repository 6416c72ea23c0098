//! SentencePiece BPE, as llama.cpp's `llm_tokenizer_spm` runs it: start from single
//! characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary entry
//! with the highest score (ties: leftmost first), then map each final piece to its token, or
//! to `<0xNN>` byte tokens when it is not in the vocabulary.
//!
//! The queue holds candidate pairs; a candidate whose sides changed since it was queued is
//! recognised by its byte length and skipped, so the whole run is O(n log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::{NO_TOKEN, Vocab};

const NONE: usize = usize::MAX;

#[derive(Clone, Copy, Debug)]
struct Sym {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair. Equal (or unordered)
    /// scores fall through to position, like llama.cpp's `<` comparator.
    fn cmp(&self, other: &Self) -> Ordering {
        match self.score.partial_cmp(&other.score) {
            Some(Ordering::Equal) | None => other.left.cmp(&self.left),
            Some(o) => o,
        }
    }
}

/// Reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct SpmScratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Bigram>,
}

/// Appends the ids of `text`, whose spaces are already escaped as `▁`.
pub(crate) fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>, sc: &mut SpmScratch) {
    let syms = &mut sc.syms;
    let heap = &mut sc.heap;
    syms.clear();
    heap.clear();
    for (i, c) in text.char_indices() {
        let k = syms.len();
        syms.push(Sym {
            start: i,
            len: c.len_utf8(),
            prev: if k == 0 { NONE } else { k - 1 },
            next: k + 1,
        });
    }
    let Some(last) = syms.last_mut() else { return };
    last.next = NONE;

    let try_add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (syms[left], syms[right]);
        let piece = &text[l.start..l.start + l.len + r.len];
        if let Some(id) = vocab.id_of(piece) {
            heap.push(Bigram {
                score: vocab.tokens[id as usize].score,
                left,
                right,
                size: piece.len(),
            });
        }
    };

    for i in 1..syms.len() {
        try_add(syms, heap, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (syms[b.left], syms[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        syms[b.left].len += r.len;
        syms[b.right].len = 0;
        syms[b.left].next = r.next;
        if r.next != NONE {
            syms[r.next].prev = b.left;
        }
        try_add(syms, heap, l.prev, b.left);
        try_add(syms, heap, b.left, r.next);
    }

    let mut i = 0;
    while i != NONE {
        let s = syms[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.id_of(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece.as_bytes() {
                    let id = vocab.byte_tokens[byte as usize];
                    if id != NO_TOKEN {
                        out.push(id);
                    } else if let Some(unk) = vocab.unk {
                        out.push(unk);
                    }
                }
            }
        }
        i = s.next;
    }
}
