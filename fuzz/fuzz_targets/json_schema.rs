//! Fuzz target: JSON Schemas, as `response_format` brings them. Any JSON value must compile
//! against the shipped model's vocabulary or be refused with a typed error, never panic.
#![no_main]

use std::sync::Arc;

use bitnet_core::constrain::{Constraint, ConstraintSpec, ConstraintVocab};
use libfuzzer_sys::fuzz_target;

mod shipped;

fn vocab() -> Arc<ConstraintVocab> {
    shipped::model().constraint_vocab().expect("its vocabulary")
}

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = Constraint::compile(&ConstraintSpec::JsonSchema(schema), &vocab());
});
