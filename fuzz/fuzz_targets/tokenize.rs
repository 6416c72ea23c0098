//! Fuzz target: the shipped model's tokenizer on arbitrary text. Encoding (with and without
//! special-token parsing) and decoding must never panic; text without special tokens must
//! come back from `decode(encode(text))` unchanged (the byte-level BPE covers every string);
//! arbitrary ids are decoded without a panic (out-of-range ones included).
#![no_main]

use bitnet_core::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

mod shipped;

fn tokenizer() -> &'static Tokenizer {
    shipped::model()
        .tokenizer()
        .expect("the shipped model has a tokenizer")
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let text = String::from_utf8_lossy(data);
    let plain = tok.encode(&text, false, false);
    let _ = tok.encode(&text, true, true);
    let back = tok.decode(&plain);
    assert_eq!(back, text, "decode(encode(text)) changed the text");
    let ids: Vec<u32> = data
        .chunks(2)
        .map(|c| u32::from(c[0]) | (u32::from(*c.get(1).unwrap_or(&0)) << 8))
        .collect();
    let _ = tok.decode(&ids);
});
