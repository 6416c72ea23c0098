//! Fuzz target: parse arbitrary bytes as a GGUF file. Any input must give `Ok` or a typed
//! error, never a panic, an abort or an out-of-bounds read. When parsing succeeds, the file
//! is written back and re-read: the second write must equal the first (the writer and the
//! reader agree on every file the reader accepts).
#![no_main]

use bitnet_gguf::{GgufFile, GgufWriter, WriteOptions};
use libfuzzer_sys::fuzz_target;

fn rewrite(f: &GgufFile) -> Vec<u8> {
    let opts = WriteOptions {
        keep_offsets: true,
        pad_tail: f.tail_padded(),
    };
    let mut w = GgufWriter::with_options(Vec::new(), f.version(), f.metadata(), f.tensors(), opts)
        .expect("a file the reader accepts must be writable");
    for t in f.tensors() {
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        w.write_tensor_data(data)
            .expect("tensor data of the declared size");
    }
    w.finish().expect("all tensors written")
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data) else {
        return;
    };
    // Exercise the getters over everything present.
    for (k, v) in f.metadata().iter() {
        let _ = (
            f.metadata().get_u64(k),
            f.metadata().get_str(k),
            v.type_name(),
        );
    }
    let once = rewrite(&f);
    let g = GgufFile::from_bytes(&once).expect("our own output must parse");
    assert_eq!(g.tensors(), f.tensors());
    assert_eq!(g.metadata().len(), f.metadata().len());
    let twice = rewrite(&g);
    assert_eq!(once, twice, "write(read(write(read(x)))) != write(read(x))");
});
