//! Fuzz target: GBNF grammars, as a request's `grammar` field brings them. Translating to
//! Lark and compiling against the shipped model's vocabulary must give a grammar or a typed
//! error, never a panic, however hostile the text.
#![no_main]

use std::sync::Arc;

use bitnet_core::constrain::{Constraint, ConstraintSpec, ConstraintVocab, gbnf_to_lark};
use libfuzzer_sys::fuzz_target;

mod shipped;

fn vocab() -> Arc<ConstraintVocab> {
    shipped::model().constraint_vocab().expect("its vocabulary")
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if gbnf_to_lark(src).is_ok() {
        let _ = Constraint::compile(&ConstraintSpec::Gbnf(src.to_owned()), &vocab());
    }
});
