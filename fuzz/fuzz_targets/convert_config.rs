//! Fuzz target: the converter's readers of a Hugging Face checkpoint's side files. The input
//! is `config.json`, a NUL byte, `tokenizer.json`, a NUL byte, `tokenizer_config.json` (a
//! part left out is a file absent). They are read as `bitnet_convert::plan` reads them:
//! the config (`HfConfig::read`), then the tokenizer for the config's route (the language
//! models' or the embedding models'), then the runtime's check of the result
//! (`Tokenizer::from_spec`). Each step must give a value or a typed `ConvertError`, never
//! a panic or an allocation the files do not justify.
//!
//! The tokenizer readers take the checkpoint's directory (they read up to six files, some
//! only when others say so), so the parts are written to a scratch directory per process.
//! A config that does not parse is replaced by the shipped checkpoint's, so the tokenizer
//! files are still read against a real vocabulary size.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bitnet_convert::{HfConfig, tokenizer};
use bitnet_core::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

const FILES: [&str; 3] = ["config.json", "tokenizer.json", "tokenizer_config.json"];

fn shipped_config() -> &'static HfConfig {
    static CFG: OnceLock<HfConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare-hf");
        HfConfig::read(Path::new(dir)).expect("the shipped checkpoint's config")
    })
}

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("bitnet-fuzz-convert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    let mut parts = data.split(|&b| b == 0);
    for name in FILES {
        let path = dir.join(name);
        match parts.next() {
            Some(bytes) => std::fs::write(&path, bytes).expect("a scratch file"),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let read = HfConfig::read(dir);
    let cfg = read.as_ref().unwrap_or_else(|_| shipped_config());
    let vocab = if cfg.is_embedding_model() {
        tokenizer::embedding::convert(dir, cfg, None)
    } else {
        tokenizer::convert(dir, cfg, None)
    };
    if let Ok(v) = vocab {
        assert!(
            v.spec.tokens.len() >= cfg.n_vocab,
            "padded to the embedding's rows"
        );
        let _ = Tokenizer::from_spec(v.spec);
    }
});
