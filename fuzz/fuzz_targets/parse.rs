//! Fuzz target: parse arbitrary bytes as a GGUF file. Any input must give `Ok` or a typed
//! error, never a panic, an abort or an out-of-bounds read. When parsing succeeds, the file
//! is written back and re-read: the second write must equal the first (the writer and the
//! reader agree on every file the reader accepts).
#![no_main]

use bitnet_gguf::{GgufError, GgufFile, GgufWriter, WriteOptions};
use libfuzzer_sys::fuzz_target;

fn rewrite(f: &GgufFile) -> Vec<u8> {
    let opts = |keep_offsets| WriteOptions {
        keep_offsets,
        pad_tail: f.tail_padded(),
    };
    // Offsets are kept where the data lies in info order; a file whose infos list their data
    // out of order (valid, and read) is laid out anew, as the streaming writer must.
    let w = match GgufWriter::with_options(
        Vec::new(),
        f.version(),
        f.metadata(),
        f.tensors(),
        opts(true),
    ) {
        Err(GgufError::InvalidLayout { .. }) => {
            let ascending = f
                .tensors()
                .windows(2)
                .all(|p| p[0].offset + p[0].n_bytes <= p[1].offset);
            assert!(
                !ascending,
                "kept offsets refused for a file whose data is in order"
            );
            GgufWriter::with_options(
                Vec::new(),
                f.version(),
                f.metadata(),
                f.tensors(),
                opts(false),
            )
        }
        w => w,
    };
    let mut w = w.expect("a file the reader accepts must be writable");
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
    assert_eq!(g.tensors().len(), f.tensors().len());
    for (a, b) in f.tensors().iter().zip(g.tensors()) {
        assert_eq!((&a.name, a.n_bytes), (&b.name, b.n_bytes));
        assert_eq!(
            f.tensor_data(a),
            g.tensor_data(b),
            "tensor data survives the rewrite"
        );
    }
    assert_eq!(g.metadata().len(), f.metadata().len());
    let twice = rewrite(&g);
    assert_eq!(once, twice, "write(read(write(read(x)))) != write(read(x))");
});
