//! Byte-level BPE, as llama.cpp's `llm_tokenizer_bpe_session` runs it: the pre-tokenizer
//! cuts the text into words; each word starts as one symbol per byte (the token of the
//! byte's GPT-2 character) and the adjacent pair with the lowest merge rank is merged until
//! no ranked pair is left (ties: leftmost first).
//!
//! Merges are looked up by the pair of token ids, which is exact because every merge was
//! checked at load time to join two tokens into a token. Stale queue entries are recognised
//! by their byte length and skipped, so a word of n bytes costs O(n log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::pretokenize::PreTokenizer;
use super::unicode;
use super::vocab::{NO_TOKEN, Vocab, pair_key};

const NONE: usize = usize::MAX;

#[derive(Clone, Copy, Debug)]
struct Sym {
    id: u32,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    merged: u32,
    size: usize,
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// Max-heap order: lowest rank first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
            .then_with(|| other.right.cmp(&self.right))
    }
}

/// Reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct BpeScratch {
    words: Vec<(usize, usize)>,
    syms: Vec<Sym>,
    heap: BinaryHeap<Bigram>,
    encoded: String,
}

/// Appends the ids of `text` (one raw-text fragment, special tokens already cut out).
pub(crate) fn encode(
    vocab: &Vocab,
    pre: &PreTokenizer,
    text: &str,
    out: &mut Vec<u32>,
    sc: &mut BpeScratch,
) {
    pre.split(text, &mut sc.words);
    let byte_chars = unicode::byte_to_char_table();
    for &(a, b) in &sc.words {
        let word = &text.as_bytes()[a..b];
        if vocab.ignore_merges {
            sc.encoded.clear();
            sc.encoded
                .extend(word.iter().map(|&byte| byte_chars[byte as usize]));
            if let Some(id) = vocab.id_of(&sc.encoded) {
                out.push(id);
                continue;
            }
        }
        merge_word(vocab, word, out, &mut sc.syms, &mut sc.heap);
    }
}

fn merge_word(
    vocab: &Vocab,
    word: &[u8],
    out: &mut Vec<u32>,
    syms: &mut Vec<Sym>,
    heap: &mut BinaryHeap<Bigram>,
) {
    syms.clear();
    heap.clear();
    let n = word.len();
    syms.extend(word.iter().enumerate().map(|(i, &byte)| Sym {
        id: vocab.byte_tokens[byte as usize],
        len: 1,
        prev: if i == 0 { NONE } else { i - 1 },
        next: if i + 1 == n { NONE } else { i + 1 },
    }));

    let try_add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (syms[left], syms[right]);
        if l.id == NO_TOKEN || r.id == NO_TOKEN {
            return;
        }
        if let Some(&(rank, merged)) = vocab.merges.get(&pair_key(l.id, r.id)) {
            heap.push(Bigram {
                rank,
                left,
                right,
                merged,
                size: l.len + r.len,
            });
        }
    };

    for i in 1..n {
        try_add(syms, heap, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (syms[b.left], syms[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        let s = &mut syms[b.left];
        s.len += r.len;
        s.id = b.merged;
        s.next = r.next;
        syms[b.right].len = 0;
        if r.next != NONE {
            syms[r.next].prev = b.left;
        }
        try_add(syms, heap, l.prev, b.left);
        try_add(syms, heap, b.left, r.next);
    }

    let mut i = if n == 0 { NONE } else { 0 };
    while i != NONE {
        // A byte whose character is missing from the vocabulary yields nothing, as in
        // llama.cpp (its one-byte fallback lookup cannot succeed for such a byte).
        if syms[i].id != NO_TOKEN {
            out.push(syms[i].id);
        }
        i = syms[i].next;
    }
}
