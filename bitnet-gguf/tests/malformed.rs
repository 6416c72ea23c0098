//! Hand-made broken files, one per way a GGUF can be wrong. Each must give its specific error
//! variant (with the key, tensor or offset it concerns), never a panic or a huge allocation.

use bitnet_gguf::{GgufError, GgufFile, MAX_ARRAY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TENSORS};

/// A little-endian byte builder for GGUF fragments.
#[derive(Clone, Default)]
struct B(Vec<u8>);

impl B {
    /// Magic, version and counts.
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> B {
        B::default()
            .raw(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    fn raw(mut self, b: &[u8]) -> B {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(self, v: u8) -> B {
        self.raw(&[v])
    }
    fn u32(self, v: u32) -> B {
        self.raw(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> B {
        self.raw(&v.to_le_bytes())
    }
    fn str(self, s: &str) -> B {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    fn kv_u32(self, key: &str, v: u32) -> B {
        self.str(key).u32(4).u32(v)
    }
    fn kv_str(self, key: &str, v: &str) -> B {
        self.str(key).u32(8).str(v)
    }
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> B {
        let mut b = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(ty).u64(offset)
    }
    /// Zero padding to the default alignment, then `n` data bytes.
    fn data(mut self, n: usize) -> B {
        while !self.0.len().is_multiple_of(32) {
            self.0.push(0);
        }
        self.0.extend(std::iter::repeat_n(0xab, n));
        self
    }
    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(&self.0)
    }
}

fn err(b: &B) -> GgufError {
    match b.parse() {
        Ok(_) => panic!("broken file was accepted"),
        Err(e) => {
            // Every message must render (and be useful).
            assert!(!e.to_string().is_empty());
            e
        }
    }
}

macro_rules! broken {
    ($name:ident, $file:expr, $pat:pat $(if $guard:expr)?) => {
        #[test]
        fn $name() {
            let e = err(&$file);
            assert!(matches!(&e, $pat $(if $guard)?), "got {e:?}");
        }
    };
}

fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> B {
    B::header(3, 1, 0).tensor("w", dims, ty, offset).data(data)
}

// ---- header ----
broken!(empty_file, B::default(), GgufError::BadMagic { found } if found.is_empty());
broken!(
    short_magic,
    B::default().raw(b"GGU"),
    GgufError::BadMagic { .. }
);
broken!(wrong_magic, B::header(3, 0, 0).raw(b"").u8(0).raw(b"").clone_with_magic(b"GGML"), GgufError::BadMagic { found } if found == b"GGML");
broken!(
    magic_only,
    B::default().raw(b"GGUF"),
    GgufError::Truncated { offset: 4, .. }
);
broken!(
    version_1,
    B::header(1, 0, 0),
    GgufError::UnsupportedVersion { version: 1 }
);
broken!(
    version_4,
    B::header(4, 0, 0),
    GgufError::UnsupportedVersion { version: 4 }
);
broken!(
    big_endian_v3,
    B::default()
        .raw(b"GGUF")
        .raw(&3u32.to_be_bytes())
        .raw(&[0; 16]),
    GgufError::BigEndian { version: 3 }
);
broken!(
    truncated_counts,
    B::default().raw(b"GGUF").u32(3).u32(0),
    GgufError::Truncated { offset: 8, .. }
);
broken!(
    absurd_tensor_count,
    B::header(3, u64::MAX, 0),
    GgufError::LimitExceeded {
        value: u64::MAX,
        ..
    }
);
broken!(
    tensor_count_exceeds_file,
    B::header(3, 1000, 0).data(64),
    GgufError::Truncated { needed: 32000, .. }
);
broken!(
    absurd_kv_count,
    B::header(3, 0, 1 << 40),
    GgufError::LimitExceeded { .. }
);

// ---- metadata ----
broken!(
    absurd_key_length,
    B::header(3, 0, 1).u64(u64::MAX).raw(&[0; 16]),
    GgufError::LimitExceeded { offset: 24, .. }
);
broken!(
    key_longer_than_file,
    B::header(3, 0, 1).u64(1000).raw(b"abc").raw(&[0; 16]),
    GgufError::Truncated { .. }
);
broken!(
    key_invalid_utf8,
    B::header(3, 0, 1).u64(2).raw(&[0xc3, 0x28]).u32(4).u32(1),
    GgufError::InvalidUtf8 { offset: 32, .. }
);
broken!(unknown_value_type, B::header(3, 0, 1).str("k").u32(13).u32(0), GgufError::UnknownValueType { type_id: 13, key, offset: 33 } if key == "k");
broken!(invalid_bool, B::header(3, 0, 1).str("flag").u32(7).u8(2), GgufError::InvalidBool { byte: 2, key, .. } if key == "flag");
broken!(truncated_u64_value, B::header(3, 0, 1).str("k").u32(10).u32(7), GgufError::Truncated { what, .. } if what.contains("\"k\""));
broken!(absurd_string_length, B::header(3, 0, 1).str("k").u32(8).u64(MAX_STRING_LEN + 1).raw(&[0; 64]), GgufError::LimitExceeded { value, .. } if *value == MAX_STRING_LEN + 1);
broken!(string_longer_than_file, B::header(3, 0, 1).str("k").u32(8).u64(1 << 20).raw(b"short"), GgufError::Truncated { needed, .. } if *needed == 1 << 20);
broken!(string_invalid_utf8, B::header(3, 0, 1).str("name").u32(8).u64(3).raw(&[b'a', 0xff, b'b']), GgufError::InvalidUtf8 { what, .. } if what.contains("name"));
broken!(
    absurd_array_length,
    B::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(4)
        .u64(MAX_ARRAY_LEN + 1)
        .raw(&[0; 64]),
    GgufError::LimitExceeded { .. }
);
broken!(array_longer_than_file, B::header(3, 0, 1).str("a").u32(9).u32(10).u64(1 << 31).raw(&[0; 64]), GgufError::Truncated { needed, .. } if *needed == 8 << 31);
broken!(
    string_array_longer_than_file,
    B::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(8)
        .u64(1 << 30)
        .raw(&[0; 64]),
    GgufError::Truncated { .. }
);
broken!(
    array_unknown_element_type,
    B::header(3, 0, 1).str("a").u32(9).u32(99).u64(1),
    GgufError::UnknownValueType { type_id: 99, .. }
);
broken!(
    array_element_truncated,
    B::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("x")
        .u64(5)
        .raw(b"ab"),
    GgufError::Truncated { .. }
);
broken!(arrays_nested_too_deep, nested(MAX_NESTING), GgufError::NestingTooDeep { key, .. } if key == "deep");
broken!(duplicate_key, B::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2), GgufError::DuplicateKey { key, offset: 41 } if key == "k");
broken!(
    alignment_zero,
    B::header(3, 0, 1).kv_u32("general.alignment", 0),
    GgufError::InvalidAlignment { value: 0, .. }
);
broken!(
    alignment_not_power_of_two,
    B::header(3, 0, 1).kv_u32("general.alignment", 48),
    GgufError::InvalidAlignment { value: 48, .. }
);
broken!(
    alignment_huge,
    B::header(3, 0, 1).kv_u32("general.alignment", 1 << 31),
    GgufError::InvalidAlignment { .. }
);
broken!(
    alignment_wrong_type,
    B::header(3, 0, 1).kv_str("general.alignment", "32"),
    GgufError::WrongType {
        found: "string",
        ..
    }
);

// ---- tensor infos ----
broken!(duplicate_tensor_name, B::header(3, 2, 0).tensor("w", &[8], 0, 0).tensor("w", &[8], 0, 32).data(64), GgufError::DuplicateTensorName { name, .. } if name == "w");
broken!(zero_dims_count, one_tensor(&[], 0, 0, 32), GgufError::BadDimCount { n_dims: 0, tensor, .. } if tensor == "w");
broken!(
    five_dims,
    one_tensor(&[1, 1, 1, 1, 1], 0, 0, 32),
    GgufError::BadDimCount { n_dims: 5, .. }
);
broken!(
    absurd_dims_count,
    B::header(3, 1, 0).str("w").u32(u32::MAX).raw(&[0; 64]),
    GgufError::BadDimCount {
        n_dims: u32::MAX,
        ..
    }
);
broken!(
    zero_dim,
    one_tensor(&[8, 0], 0, 0, 32),
    GgufError::ZeroDim { index: 1, .. }
);
broken!(dims_product_overflows, one_tensor(&[1 << 20, 1 << 20, 1 << 20, 1 << 20], 0, 0, 32), GgufError::SizeOverflow { tensor, .. } if tensor == "w");
broken!(
    byte_size_overflows,
    one_tensor(&[1 << 31, 1 << 31], 28, 0, 32),
    GgufError::SizeOverflow { .. }
);
broken!(
    removed_type_id,
    one_tensor(&[32], 4, 0, 32),
    GgufError::UnknownTensorType {
        id: 4,
        offset: 24,
        ..
    }
);
broken!(
    unknown_type_id,
    one_tensor(&[32], 1000, 0, 32),
    GgufError::UnknownTensorType { id: 1000, .. }
);
broken!(
    bitnet_cpp_tl1,
    one_tensor(&[32], 38, 0, 32),
    GgufError::UnsupportedTensorType { id: 38, .. }
);
broken!(
    bitnet_cpp_i8_s,
    one_tensor(&[32], 37, 0, 32),
    GgufError::UnsupportedTensorType { id: 37, .. }
);
broken!(
    id_39_ambiguous,
    B::header(3, 1, 1)
        .kv_str("general.architecture", "bitnet")
        .tensor("w", &[32], 39, 0)
        .data(32),
    GgufError::AmbiguousTensorType { id: 39, .. }
);
broken!(id_39_is_tl2_in_bitnet_cpp, B::header(3, 1, 1).kv_str("general.architecture", "bitnet-25").tensor("w", &[32], 39, 0).data(32), GgufError::UnsupportedTensorType { id: 39, name, .. } if name.contains("TL2"));
broken!(
    row_not_block_multiple,
    one_tensor(&[100, 2], 35, 0, 200),
    GgufError::NotBlockMultiple {
        value: 100,
        block: 256,
        ..
    }
);
broken!(
    misaligned_offset,
    one_tensor(&[4], 0, 4, 64),
    GgufError::MisalignedTensor {
        offset: 4,
        alignment: 32,
        ..
    }
);
broken!(
    tensor_past_end,
    one_tensor(&[64], 0, 0, 100),
    GgufError::TensorOutOfBounds {
        n_bytes: 256,
        data_len: 100,
        ..
    }
);
broken!(
    tensor_offset_overflows,
    one_tensor(&[64], 0, u64::MAX - 31, 256),
    GgufError::TensorOutOfBounds { .. }
);
broken!(
    tensor_data_section_missing,
    B::header(3, 1, 0).tensor("w", &[8], 0, 0),
    GgufError::TensorOutOfBounds { data_len: 0, .. }
);
broken!(overlapping_tensors, B::header(3, 2, 0).tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32).data(96), GgufError::OverlappingTensors { first, second } if first == "a" && second == "b");
broken!(truncated_tensor_info, B::header(3, 1, 0).str(&"w".repeat(20)).u32(2).u64(8), GgufError::Truncated { what, .. } if what.contains("dimension 1 of tensor \"wwww"));
broken!(
    tensor_name_invalid_utf8,
    B::header(3, 1, 0)
        .u64(1)
        .u8(0xfe)
        .u32(1)
        .u64(8)
        .u32(0)
        .u64(0)
        .data(32),
    GgufError::InvalidUtf8 { .. }
);
broken!(
    tensor_name_too_long,
    B::header(3, 1, 0)
        .str(&"x".repeat(5000))
        .u32(1)
        .u64(8)
        .u32(0)
        .u64(0)
        .data(32),
    GgufError::LimitExceeded { value: 5000, .. }
);
broken!(
    too_many_tensors,
    B::header(3, MAX_TENSORS + 1, 0),
    GgufError::LimitExceeded { .. }
);

impl B {
    fn clone_with_magic(mut self, m: &[u8; 4]) -> B {
        self.0[..4].copy_from_slice(m);
        self
    }
    fn truncate(mut self, by: isize) -> B {
        let n = (self.0.len() as isize + by).max(0) as usize;
        self.0.truncate(n);
        self
    }
}

fn nested(depth: u32) -> B {
    let mut b = B::header(3, 0, 1).str("deep").u32(9);
    for _ in 0..depth {
        b = b.u32(9).u64(1);
    }
    b.u32(4).u64(0)
}

#[test]
fn nesting_at_the_limit_is_accepted() {
    let f = nested(MAX_NESTING - 1).parse().unwrap();
    assert_eq!(f.metadata().get_array("deep").unwrap().len(), 1);
}

#[test]
fn tensors_in_any_order_and_touching_are_accepted() {
    let b = B::header(3, 2, 0)
        .tensor("late", &[8], 0, 32)
        .tensor("early", &[8], 0, 0)
        .data(64);
    let f = b.parse().unwrap();
    assert_eq!(f.tensors()[0].name, "late");
    assert_eq!(f.tensor_bytes("early").unwrap(), &[0xab; 32][..]);
}

#[test]
fn every_prefix_of_a_valid_file_is_an_error_not_a_panic() {
    let full = B::header(3, 2, 3)
        .kv_str("general.architecture", "bitnet")
        .kv_u32("general.alignment", 32)
        .str("toks")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("a")
        .str("bc")
        .tensor("x", &[256], 35, 0)
        .tensor("y", &[4, 2], 1, 96)
        .data(96 + 16);
    assert!(full.parse().is_ok());
    for n in 0..full.0.len() {
        let prefix = B(full.0[..n].to_vec());
        assert!(prefix.parse().is_err(), "prefix of {n} bytes accepted");
    }
}

#[test]
fn foreign_tensor_info_gets_an_empty_slice() {
    let f = one_tensor(&[8], 0, 0, 32).parse().unwrap();
    let mut t = f.tensors()[0].clone();
    t.offset = 1 << 40;
    assert!(f.tensor_data(&t).is_empty());
    t.offset = u64::MAX;
    assert!(f.tensor_data(&t).is_empty());
}

#[test]
fn messages_name_what_and_where() {
    let e = err(&one_tensor(&[100, 2], 35, 0, 200));
    let msg = e.to_string();
    assert!(msg.contains("\"w\"") && msg.contains("256"), "{msg}");
    let e = err(&B::header(3, 0, 1).str("my.key").u32(42).u32(0));
    let msg = e.to_string();
    assert!(
        msg.contains("my.key") && msg.contains("42") && msg.contains("byte 38"),
        "{msg}"
    );
}

#[test]
fn absurd_counts_fail_without_allocating() {
    // If any of these allocated per the declared count, the test would abort (OOM) or take
    // seconds; they must fail at once.
    let t = std::time::Instant::now();
    for b in [
        B::header(3, 0, 1)
            .str("a")
            .u32(9)
            .u32(9)
            .u64(u32::MAX as u64)
            .raw(&[0; 64]),
        B::header(3, 0, 1)
            .str("a")
            .u32(9)
            .u32(8)
            .u64(u32::MAX as u64)
            .raw(&[0; 64]),
        B::header(3, MAX_TENSORS, 0).raw(&[0; 64]),
        B::header(3, 0, 1 << 19).raw(&[0; 64]),
    ] {
        assert!(b.parse().is_err());
    }
    assert!(t.elapsed().as_secs() < 2);
}

broken!(
    tensor_data_cut_by_one_byte,
    one_tensor(&[64], 0, 0, 256).truncate(-1),
    GgufError::TensorOutOfBounds {
        n_bytes: 256,
        data_len: 255,
        ..
    }
);
