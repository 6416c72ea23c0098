//! bitnet-gguf: GGUF v2/v3 reader and writer (being written).
#![forbid(unsafe_code)]
