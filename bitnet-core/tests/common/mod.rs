//! Shared helpers of the correctness tests: independent tensor decoders, the f32 reference
//! forward pass, logits metrics, and access to the golden files.
#![allow(dead_code)]

pub mod decode;
pub mod metrics;
pub mod models;
pub mod reference;
pub mod sched;
pub mod setup;

use std::path::PathBuf;

/// `golden/REL` of the test data (`testdata/`); a missing file fails the test.
pub fn golden(rel: &str) -> PathBuf {
    bitnet_testdata::path(&format!("golden/{rel}"))
}

/// The `tokens` array of a golden JSON file (a tiny parser: the files are ours to read, and
/// a JSON dependency for one integer array is not worth it).
pub fn golden_tokens(json: &std::path::Path) -> Vec<u32> {
    let s = std::fs::read_to_string(json).unwrap();
    let at = s.find("\"tokens\"").expect("no tokens key");
    let rest = &s[at..];
    let open = rest.find('[').unwrap();
    let close = rest.find(']').unwrap();
    rest[open + 1..close]
        .split(',')
        .map(|x| x.trim().parse::<u32>().expect("token id"))
        .collect()
}

/// A raw little-endian f32 file.
pub fn read_f32s(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A fresh temporary directory for one test, removed when the test process exits.
pub fn tmp_dir(tag: &str) -> PathBuf {
    bitnet_test_scratch::fresh_dir(tag)
}
