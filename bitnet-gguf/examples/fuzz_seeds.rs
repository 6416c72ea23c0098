//! Writes small fuzzing seeds derived from GGUF files: every array cut to 16 elements and only
//! the smallest few tensors kept, so the fuzzer starts from realistic headers (bitnet.cpp's
//! and llama.cpp's) without spending its time copying megabytes.
//!
//! Usage: `cargo run -p bitnet-gguf --example fuzz_seeds -- OUT_DIR FILE.gguf...`

use bitnet_gguf::{Array, GgufFile, GgufWriter, LoadMode, Metadata, Value};

fn shrink(a: &Array) -> Array {
    const N: usize = 16;
    match a {
        Array::U8(v) => Array::U8(v.iter().take(N).copied().collect()),
        Array::I8(v) => Array::I8(v.iter().take(N).copied().collect()),
        Array::U16(v) => Array::U16(v.iter().take(N).copied().collect()),
        Array::I16(v) => Array::I16(v.iter().take(N).copied().collect()),
        Array::U32(v) => Array::U32(v.iter().take(N).copied().collect()),
        Array::I32(v) => Array::I32(v.iter().take(N).copied().collect()),
        Array::U64(v) => Array::U64(v.iter().take(N).copied().collect()),
        Array::I64(v) => Array::I64(v.iter().take(N).copied().collect()),
        Array::F32(v) => Array::F32(v.iter().take(N).copied().collect()),
        Array::F64(v) => Array::F64(v.iter().take(N).copied().collect()),
        Array::Bool(v) => Array::Bool(v.iter().take(N).copied().collect()),
        Array::String(v) => Array::String(v.iter().take(N).cloned().collect()),
        Array::Array(v) => Array::Array(v.iter().take(N).map(shrink).collect()),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: fuzz_seeds OUT_DIR FILE.gguf...")?;
    for path in args {
        let f = GgufFile::open(&path, LoadMode::Read)?;
        let md: Metadata = f
            .metadata()
            .iter()
            .map(|(k, v)| match v {
                Value::Array(a) => (k, Value::Array(shrink(a))),
                other => (k, other.clone()),
            })
            .collect();
        let mut small: Vec<_> = f.tensors().iter().filter(|t| t.n_bytes <= 9000).collect();
        small.sort_by_key(|t| t.n_bytes);
        small.dedup_by_key(|t| (t.ty, t.n_bytes));
        let infos: Vec<_> = small.iter().map(|&t| t.clone()).collect();
        let mut w = GgufWriter::new(Vec::new(), f.version(), &md, &infos, false)?;
        for t in &small {
            w.write_tensor_data(f.tensor_data(t))?;
        }
        let bytes = w.finish()?;
        let name = std::path::Path::new(&path).file_name().ok_or("bad path")?;
        let dst = std::path::Path::new(&out)
            .join(name)
            .with_extension("seed.gguf");
        std::fs::write(&dst, &bytes)?;
        println!(
            "{}: {} bytes, {} tensors",
            dst.display(),
            bytes.len(),
            infos.len()
        );
    }
    Ok(())
}
