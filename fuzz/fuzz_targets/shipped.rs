//! The shipped model, loaded once per fuzzing process, for the targets that need its
//! tokenizer, its vocabulary or its file (`mod shipped;` in each).

use std::sync::OnceLock;

use bitnet_core::{LoadOptions, Model};

pub const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");

pub fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        Model::load(PATH, &LoadOptions::default()).expect("the shipped model loads")
    })
}
