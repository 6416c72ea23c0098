//! Fuzz target: JSON Schemas, as `response_format` brings them. Any JSON value must compile
//! against the shipped model's vocabulary or be refused with a typed error, never panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use bitnet_core::constrain::{Constraint, ConstraintSpec, ConstraintVocab};
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
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = Constraint::compile(&ConstraintSpec::JsonSchema(schema), vocab());
});
