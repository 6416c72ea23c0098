//! The in-place read of a token's weights (`bench`'s decode bound) reads what decode reads.

use std::sync::Arc;

use bitnet_core::model::{HeadMode, Model};
use bitnet_core::{Engine, EngineOptions, LoadOptions};

fn engine(head: HeadMode, threads: usize) -> (Arc<Model>, Engine) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
    let opts = LoadOptions {
        head: Some(head),
        ..LoadOptions::default()
    };
    let m = Arc::new(Model::load(path, &opts).unwrap());
    let options = EngineOptions {
        threads,
        pin: false,
        ..EngineOptions::default()
    };
    (m.clone(), Engine::new(m, &options).unwrap())
}

#[test]
fn the_read_covers_the_bytes_a_decoded_token_streams() {
    for head in [HeadMode::Native, HeadMode::Q8] {
        for threads in [1, 2, 3] {
            let (model, mut engine) = engine(head, threads);
            let read = engine.read_streamed_weights();
            let counted = model.decode_bytes_per_token();
            // The count adds the per-block scales (a few KiB) to the bytes read.
            assert!(
                read.bytes <= counted,
                "{head:?}: {} > {counted}",
                read.bytes
            );
            assert!(
                read.bytes * 100 >= counted * 98,
                "{head:?}: read {} of {counted}",
                read.bytes
            );
            assert!(read.secs > 0.0 && read.gbs() > 0.0);
        }
    }
}
