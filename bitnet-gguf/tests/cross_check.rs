//! Cross-checks against an independent implementation, the `gguf-rs-lib` crate: the metadata
//! and tensor infos of every test data file it can open, and the block sizes of every tensor type
//! it knows. It cannot open bitnet.cpp files (it refuses type id 36), which is why the reader
//! in this crate is our own; that refusal is asserted too, so this test notices if it changes.

use bitnet_gguf::{Array, GgufFile, LoadMode, TensorType, Value};
use gguf_rs_lib::format::metadata::MetadataValue;
use gguf_rs_lib::format::types::GGUFTensorType;
use gguf_rs_lib::reader::file_reader::open_gguf_file;

/// Their value converted to ours, element types preserved.
fn convert(v: &MetadataValue) -> Value {
    match v {
        MetadataValue::U8(x) => Value::U8(*x),
        MetadataValue::I8(x) => Value::I8(*x),
        MetadataValue::U16(x) => Value::U16(*x),
        MetadataValue::I16(x) => Value::I16(*x),
        MetadataValue::U32(x) => Value::U32(*x),
        MetadataValue::I32(x) => Value::I32(*x),
        MetadataValue::U64(x) => Value::U64(*x),
        MetadataValue::I64(x) => Value::I64(*x),
        MetadataValue::F32(x) => Value::F32(*x),
        MetadataValue::F64(x) => Value::F64(*x),
        MetadataValue::Bool(x) => Value::Bool(*x),
        MetadataValue::String(s) => Value::String(s.clone()),
        MetadataValue::Array(a) => Value::Array(convert_array(&a.values, a.element_type as u32)),
    }
}

fn convert_array(vals: &[MetadataValue], elem: u32) -> Array {
    macro_rules! collect {
        ($variant:ident) => {
            Array::$variant(
                vals.iter()
                    .map(|v| match convert(v) {
                        Value::$variant(x) => x,
                        other => panic!("mixed array element {other:?}"),
                    })
                    .collect(),
            )
        };
    }
    match elem {
        0 => collect!(U8),
        1 => collect!(I8),
        2 => collect!(U16),
        3 => collect!(I16),
        4 => collect!(U32),
        5 => collect!(I32),
        6 => collect!(F32),
        7 => collect!(Bool),
        8 => collect!(String),
        10 => collect!(U64),
        11 => collect!(I64),
        12 => collect!(F64),
        9 => Array::Array(
            vals.iter()
                .map(|v| match convert(v) {
                    Value::Array(a) => a,
                    other => panic!("non-array in array of arrays: {other:?}"),
                })
                .collect(),
        ),
        t => panic!("unknown element type {t}"),
    }
}

#[test]
fn metadata_and_tensor_infos_agree_with_gguf_rs_lib() {
    let files = [
        ("vocab/ggml-vocab-llama-spm.gguf", true),
        ("vocab/ggml-vocab-llama-bpe.gguf", true),
        ("vocab/ggml-vocab-gpt-2.gguf", true),
        ("vocab/ggml-vocab-starcoder.gguf", true),
        ("golden/gguf/upstream-tiny-tq1_0.gguf", true),
        ("golden/gguf/upstream-tiny-tq2_0.gguf", true),
        // I2_S (id 36) is unknown to gguf-rs-lib.
        ("golden/gguf/bitnet-tiny-i2_s.gguf", false),
    ];
    let mut compared = 0;
    for (rel, theirs_can_read) in files {
        let p = bitnet_testdata::path(rel);
        let ours = GgufFile::open(&p, LoadMode::Mmap).unwrap();
        let theirs = match open_gguf_file(&p) {
            Ok(r) => r,
            Err(e) => {
                assert!(!theirs_can_read, "{rel}: gguf-rs-lib failed: {e}");
                continue;
            }
        };
        assert!(
            theirs_can_read,
            "{rel}: gguf-rs-lib now reads it; add it to the comparison"
        );
        assert_eq!(theirs.header().version, ours.version(), "{rel}");
        assert_eq!(theirs.metadata().len(), ours.metadata().len(), "{rel}");
        for (key, v) in theirs.metadata().iter() {
            let mine = ours
                .metadata()
                .get(key)
                .unwrap_or_else(|| panic!("{rel}: {key} missing"));
            assert_eq!(&convert(v), mine, "{rel}: {key}");
        }
        assert_eq!(theirs.tensor_count(), ours.tensors().len());
        assert_eq!(theirs.tensor_data_offset(), ours.data_offset(), "{rel}");
        for t in ours.tensors() {
            let o = theirs.get_tensor_info(&t.name).unwrap();
            assert_eq!(o.shape.dimensions, t.dims, "{rel}: {}", t.name);
            assert_eq!(o.tensor_type as u32, t.ty.id(), "{rel}: {}", t.name);
            assert_eq!(o.data_offset, t.offset, "{rel}: {}", t.name);
        }
        compared += 1;
    }
    assert_eq!(compared, 6);
}

#[test]
fn block_sizes_agree_with_gguf_rs_lib() {
    let mut checked = 0;
    for &t in TensorType::ALL {
        if t == TensorType::I2_S {
            continue; // bitnet.cpp-only, unknown to gguf-rs-lib
        }
        let theirs = GGUFTensorType::from_u32(t.id()).unwrap_or_else(|e| {
            panic!(
                "gguf-rs-lib does not know id {} ({}): {e}",
                t.id(),
                t.name()
            )
        });
        assert_eq!(theirs.block_size() as u64, t.block_len(), "{}", t.name());
        assert_eq!(
            theirs.checked_calculate_size(t.block_len() * 3),
            Some(t.block_bytes() * 3),
            "{}",
            t.name()
        );
        assert_eq!(t.bytes_for(t.block_len() * 3).unwrap(), t.block_bytes() * 3);
        checked += 1;
    }
    assert_eq!(checked, TensorType::ALL.len() - 1);
}
