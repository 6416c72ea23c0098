//! Fuzz target: GBNF grammars, as a request's `grammar` field brings them. Translating to
//! Lark and compiling against the shipped model's vocabulary must give a grammar or a typed
//! error, never a panic, however hostile the text.
#![no_main]

use std::sync::{Arc, OnceLock};

use bitnet_core::constrain::{Constraint, ConstraintSpec, ConstraintVocab, gbnf_to_lark};
use bitnet_core::{LoadOptions, Model};
use libfuzzer_sys::fuzz_target;

fn vocab() -> &'static Arc<ConstraintVocab> {
    static VOCAB: OnceLock<Arc<ConstraintVocab>> = OnceLock::new();
    VOCAB.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
        let model = Model::load(path, &LoadOptions::default()).expect("the shipped model loads");
        model.constraint_vocab().expect("its vocabulary")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if gbnf_to_lark(src).is_ok() {
        let _ = Constraint::compile(&ConstraintSpec::Gbnf(src.to_owned()), vocab());
    }
});
