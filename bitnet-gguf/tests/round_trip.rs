//! Writer tests: every GGUF of the test data read and written back is byte-identical, through the
//! streaming writer in one go and in small chunks, and files built from scratch read back
//! with the same metadata, tensors and alignment.

use bitnet_gguf::{
    Array, GgufError, GgufFile, GgufWriter, LoadMode, Metadata, TensorInfo, TensorType, Value,
    WriteOptions, write_to_vec,
};

const SHARED: &[&str] = &[
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-llama-bpe.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "vocab/ggml-vocab-starcoder.gguf",
    "golden/gguf/bitnet-tiny-i2_s.gguf",
    "golden/gguf/upstream-tiny-tq1_0.gguf",
    "golden/gguf/upstream-tiny-tq2_0.gguf",
];

fn rewrite(f: &GgufFile, chunk: usize) -> Vec<u8> {
    let opts = WriteOptions {
        keep_offsets: true,
        pad_tail: f.tail_padded(),
    };
    let mut w =
        GgufWriter::with_options(Vec::new(), f.version(), f.metadata(), f.tensors(), opts).unwrap();
    for t in f.tensors() {
        for piece in f.tensor_data(t).chunks(chunk) {
            w.write_tensor_data(piece).unwrap();
        }
    }
    w.finish().unwrap()
}

#[test]
fn every_shared_file_round_trips_byte_identical() {
    let mut seen = 0;
    for rel in SHARED {
        let p = bitnet_testdata::path(rel);
        let f = GgufFile::open(&p, LoadMode::Mmap).unwrap();
        let original = std::fs::read(&p).unwrap();
        let out = rewrite(&f, usize::MAX);
        assert!(
            out == original,
            "{rel}: rewrite differs ({} vs {} bytes)",
            out.len(),
            original.len()
        );
        seen += 1;
    }
    // Also every .gguf in the directory tree, so a file added later is covered too.
    let mut stack = vec![bitnet_testdata::dir().to_path_buf()];
    let mut all = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "gguf") {
                let f = GgufFile::open(&p, LoadMode::Read).unwrap();
                assert!(
                    rewrite(&f, usize::MAX) == std::fs::read(&p).unwrap(),
                    "{}",
                    p.display()
                );
                all += 1;
            }
        }
    }
    assert_eq!(seen, SHARED.len());
    let dir = bitnet_testdata::dir().display();
    assert!(all >= SHARED.len(), "found only {all} files under {dir}");
}

#[test]
fn chunked_writes_give_the_same_bytes() {
    let p = bitnet_testdata::path("golden/gguf/bitnet-tiny-i2_s.gguf");
    let f = GgufFile::open(&p, LoadMode::Mmap).unwrap();
    assert!(rewrite(&f, 1000) == std::fs::read(&p).unwrap());
}

#[test]
fn repacked_offsets_match_llama_cpp_layout() {
    // Without keep_offsets the writer packs tensors in order with alignment padding, which is
    // exactly how llama.cpp laid out these files.
    for rel in &SHARED[4..] {
        let p = bitnet_testdata::path(rel);
        let f = GgufFile::open(&p, LoadMode::Mmap).unwrap();
        let w = GgufWriter::new(Vec::new(), 3, f.metadata(), f.tensors(), false).unwrap();
        let offs: Vec<u64> = w.offsets().map(|(_, o)| o).collect();
        let want: Vec<u64> = f.tensors().iter().map(|t| t.offset).collect();
        assert_eq!(offs, want, "{rel}");
    }
}

fn every_type_metadata() -> Metadata {
    let mut m = Metadata::new();
    m.insert("general.architecture", "test");
    m.insert("t.u8", 200u8);
    m.insert("t.i8", -100i8);
    m.insert("t.u16", 60000u16);
    m.insert("t.i16", -30000i16);
    m.insert("t.u32", 4_000_000_000u32);
    m.insert("t.i32", -2_000_000_000i32);
    m.insert("t.u64", u64::MAX);
    m.insert("t.i64", i64::MIN);
    m.insert("t.f32", f32::from_bits(0x7fc0_1234)); // a NaN with a payload: bits must survive
    m.insert("t.f64", -0.0f64);
    m.insert("t.bool", true);
    m.insert("t.str", "héllo ✓");
    m.insert("t.empty_str", "");
    m.insert("t.arr_u8", vec![1u8, 2, 3]);
    m.insert("t.arr_bool", vec![true, false]);
    m.insert("t.arr_empty_f64", Vec::<f64>::new());
    m.insert(
        "t.nested",
        Array::Array(vec![
            Array::I16(vec![-1, 2]),
            Array::String(vec!["a".into(), String::new()]),
            Array::Array(vec![Array::U64(vec![7])]),
            Array::Array(vec![]),
        ]),
    );
    m
}

#[test]
fn every_value_type_and_nested_arrays_survive() {
    for version in [2, 3] {
        let m = every_type_metadata();
        let bytes = write_to_vec(version, &m, &[]).unwrap();
        let f = GgufFile::from_bytes(&bytes).unwrap();
        assert_eq!(f.version(), version);
        let got: Vec<_> = f.metadata().iter().map(|(k, _)| k.to_owned()).collect();
        let want: Vec<_> = m.iter().map(|(k, _)| k.to_owned()).collect();
        assert_eq!(got, want, "order kept");
        for (k, v) in m.iter() {
            match (v, f.metadata().get(k).unwrap()) {
                (Value::F32(a), Value::F32(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                (Value::F64(a), Value::F64(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                (a, b) => assert_eq!(a, b, "{k}"),
            }
        }
        assert_eq!(bytes.len() % 32, 0, "tail padded by default");
    }
}

#[test]
fn alignment_is_honoured_on_write_and_read() {
    for align in [1u32, 8, 32, 64, 4096] {
        let mut m = Metadata::new();
        m.insert("general.alignment", align);
        let a = TensorInfo::new("a", vec![3], TensorType::F32).unwrap(); // 12 bytes
        let b = TensorInfo::new("b", vec![256, 2], TensorType::TQ2_0).unwrap(); // 132 bytes
        let c = TensorInfo::new("c", vec![128], TensorType::Q1_0).unwrap(); // 18 bytes
        let da: Vec<u8> = (0..12).collect();
        let db: Vec<u8> = (0..132).map(|i| i as u8 ^ 0x5a).collect();
        let dc: Vec<u8> = vec![0xee; 18];
        let bytes = write_to_vec(3, &m, &[(a, &da), (b, &db), (c, &dc)]).unwrap();
        let f = GgufFile::from_bytes(&bytes).unwrap();
        let align = u64::from(align);
        assert_eq!(f.alignment(), align);
        assert_eq!(f.data_offset() % align, 0);
        assert_eq!(bytes.len() as u64 % align, 0);
        for t in f.tensors() {
            assert_eq!(t.offset % align, 0, "{}", t.name);
        }
        assert_eq!(f.tensor_bytes("a").unwrap(), &da[..]);
        assert_eq!(f.tensor_bytes("b").unwrap(), &db[..]);
        assert_eq!(f.tensor_bytes("c").unwrap(), &dc[..]);
        assert_eq!(f.tensor("c").unwrap().ty, TensorType::Q1_0);
        let offs: Vec<u64> = f.tensors().iter().map(|t| t.offset).collect();
        assert_eq!(
            offs,
            [
                0,
                12u64.next_multiple_of(align),
                (12u64.next_multiple_of(align) + 132).next_multiple_of(align)
            ]
        );
    }
}

#[test]
fn writer_rejects_misuse() {
    let m = Metadata::new();
    let t = TensorInfo::new("t", vec![4], TensorType::F32).unwrap();
    let two = [
        t.clone(),
        TensorInfo::new("u", vec![2], TensorType::F16).unwrap(),
    ];

    // Too many bytes for the current tensor.
    let mut w = GgufWriter::new(Vec::new(), 3, &m, &two, false).unwrap();
    assert!(
        matches!(w.write_tensor_data(&[0; 17]), Err(GgufError::TensorDataMismatch { tensor, .. }) if tensor == "t")
    );
    // Finishing early names the missing tensor.
    w.write_tensor_data(&[0; 16]).unwrap();
    assert!(
        matches!(w.finish(), Err(GgufError::TensorDataMismatch { tensor, .. }) if tensor == "u")
    );
    // Data after the last tensor.
    let mut w = GgufWriter::new(Vec::new(), 3, &m, &two[..1], false).unwrap();
    w.write_tensor_data(&[0; 16]).unwrap();
    assert!(matches!(
        w.write_tensor_data(&[0]),
        Err(GgufError::TensorDataMismatch { .. })
    ));
    // Bad versions, duplicate names, inconsistent sizes, bad kept offsets, bad alignment.
    assert!(matches!(
        GgufWriter::new(Vec::new(), 1, &m, &[], false),
        Err(GgufError::UnsupportedVersion { version: 1 })
    ));
    let dup = [t.clone(), t.clone()];
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &m, &dup, false),
        Err(GgufError::InvalidLayout { .. })
    ));
    let mut lying = t.clone();
    lying.n_bytes = 3;
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &m, &[lying], false),
        Err(GgufError::InvalidLayout { .. })
    ));
    let mut odd = two.clone();
    odd[1].offset = 8;
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &m, &odd, true),
        Err(GgufError::InvalidLayout { .. })
    ));
    odd[1].offset = 40;
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &m, &odd, true),
        Err(GgufError::InvalidLayout { .. })
    ));
    odd[1].offset = 64;
    let w = GgufWriter::new(Vec::new(), 3, &m, &odd, true).unwrap();
    assert_eq!(w.offsets().map(|(_, o)| o).collect::<Vec<_>>(), [0, 64]);
    let mut bad = Metadata::new();
    bad.insert("general.alignment", 48u32);
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &bad, &[], false),
        Err(GgufError::InvalidAlignment { value: 48, .. })
    ));
    bad.insert("general.alignment", "32");
    assert!(matches!(
        GgufWriter::new(Vec::new(), 3, &bad, &[], false),
        Err(GgufError::WrongType { .. })
    ));
}

#[test]
fn pad_tail_off_reproduces_unpadded_files() {
    let mut m = Metadata::new();
    m.insert("k", "abc");
    let opts = WriteOptions {
        keep_offsets: false,
        pad_tail: false,
    };
    let bytes = GgufWriter::with_options(Vec::new(), 3, &m, &[], opts)
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(bytes.len(), 4 + 4 + 8 + 8 + (8 + 1 + 4 + 8 + 3));
    let f = GgufFile::from_bytes(&bytes).unwrap();
    assert!(!f.tail_padded());
    assert_eq!(f.metadata().get_str("k").unwrap(), "abc");
}

/// Fuzz finding (`parse`, 2026-12-07): a file whose tensor infos list their data out of
/// order (a tensor at offset 4096 after one that ends at 14534) is a valid GGUF and reads,
/// but the streaming writer cannot keep its offsets (it writes data in info order). The
/// target's property was too strong, not the reader wrong: the writer refuses `keep_offsets`
/// with a typed error and lays the file out anew without it, and every tensor's bytes survive.
#[test]
fn out_of_order_offsets_read_and_are_rewritten_packed() {
    let bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/out-of-order-offsets.gguf"),
    )
    .unwrap();
    let f = GgufFile::from_bytes(&bytes).unwrap();
    let offsets: Vec<u64> = f.tensors().iter().map(|t| t.offset).collect();
    assert!(offsets.windows(2).any(|w| w[1] < w[0]), "{offsets:?}");
    let keep = WriteOptions {
        keep_offsets: true,
        pad_tail: f.tail_padded(),
    };
    let refused =
        GgufWriter::with_options(Vec::new(), f.version(), f.metadata(), f.tensors(), keep);
    assert!(matches!(refused, Err(GgufError::InvalidLayout { .. })));
    let packed = WriteOptions {
        keep_offsets: false,
        pad_tail: f.tail_padded(),
    };
    let mut w =
        GgufWriter::with_options(Vec::new(), f.version(), f.metadata(), f.tensors(), packed)
            .unwrap();
    for t in f.tensors() {
        w.write_tensor_data(f.tensor_data(t)).unwrap();
    }
    let out = w.finish().unwrap();
    let g = GgufFile::from_bytes(&out).unwrap();
    assert_eq!(g.metadata().len(), f.metadata().len());
    for (a, b) in f.tensors().iter().zip(g.tensors()) {
        assert_eq!((&a.name, a.n_bytes), (&b.name, b.n_bytes));
        assert_eq!(f.tensor_data(a), g.tensor_data(b), "{}", a.name);
    }
}
