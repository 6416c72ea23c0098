//! The GGUF the repository ships is what the converter makes of the shipped checkpoint
//! (`models/shakespeare-hf`, written by `tools/train`), byte for byte: the model in the repo
//! can always be rebuilt from its source.

use std::path::PathBuf;

#[test]
fn the_shipped_gguf_is_reproduced_byte_for_byte() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = bitnet_test_scratch::fresh_dir("shipped").join("shakespeare.gguf");
    bitnet_convert::convert(
        &root.join("models/shakespeare-hf"),
        &out,
        &bitnet_convert::Options::default(),
        &mut |_| {},
    )
    .unwrap();
    let made = std::fs::read(&out).unwrap();
    let shipped = std::fs::read(root.join("models/shakespeare.gguf")).unwrap();
    assert_eq!(made.len(), shipped.len(), "sizes differ");
    assert!(
        made == shipped,
        "the shipped GGUF differs from a fresh conversion"
    );
}
