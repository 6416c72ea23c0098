//! Prints a GGUF file's header: version, alignment, metadata (long arrays summarised) and
//! tensor table, plus how long opening took. The Rust counterpart of `gguf_tool.py`'s listing.
//!
//! Usage: `cargo run --release -p bitnet-gguf --example gguf_dump -- FILE.gguf [--read]`

use std::io::Write;

use bitnet_gguf::{GgufFile, LoadMode, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match run() {
        // `gguf_dump x.gguf | head` closes the pipe early: not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: gguf_dump FILE.gguf [--read]")?;
    let mode = if args.iter().any(|a| a == "--read") {
        LoadMode::Read
    } else {
        LoadMode::Mmap
    };
    let t0 = std::time::Instant::now();
    let f = GgufFile::open(path, mode)?;
    let took = t0.elapsed();
    writeln!(
        out,
        "{path}: GGUF v{}, {} bytes, alignment {}, data at {}, {:?} flavour, opened ({mode:?}) in {took:.2?}",
        f.version(),
        f.file_size(),
        f.alignment(),
        f.data_offset(),
        f.flavour()
    )?;
    for (k, v) in f.metadata().iter() {
        let shown = match v {
            Value::Array(a) if a.len() > 8 => format!("[{} x {}]", a.len(), a.type_name()),
            Value::String(s) if s.len() > 80 => format!(
                "{:?}... ({} bytes)",
                s.chars().take(60).collect::<String>(),
                s.len()
            ),
            other => format!("{other:?}"),
        };
        writeln!(out, "  {k} ({}) = {shown}", v.type_name())?;
    }
    for t in f.tensors() {
        writeln!(
            out,
            "  {:<32} {:<6} {:?} offset {} bytes {}",
            t.name,
            t.ty.name(),
            t.dims,
            t.offset,
            t.n_bytes
        )?;
    }
    Ok(())
}
