//! Opens every GGUF of the test data (testdata/) with both load modes and checks what llama.cpp,
//! bitnet.cpp and testdata/README.md say about them.

use bitnet_gguf::{Flavour, GgufFile, LoadMode, TensorType, i2s_scale};

use bitnet_testdata::path;

fn open_both(rel: &str) -> (GgufFile, GgufFile) {
    let p = path(rel);
    let m = GgufFile::open(&p, LoadMode::Mmap).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let r = GgufFile::open(&p, LoadMode::Read).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(m.is_mmap() && !r.is_mmap());
    assert_eq!(m.metadata(), r.metadata());
    assert_eq!(m.tensors(), r.tensors());
    assert_eq!(m.as_bytes(), r.as_bytes());
    assert_eq!(
        r.as_bytes().as_ptr() as usize % 64,
        0,
        "owned buffer is 64-byte aligned"
    );
    (m, r)
}

#[test]
fn vocab_files() {
    // (file, tokens, first token, model, has merges)
    let cases = [
        ("ggml-vocab-llama-spm.gguf", 32000, "<unk>", "llama", false),
        ("ggml-vocab-llama-bpe.gguf", 128256, "!", "gpt2", true),
        ("ggml-vocab-gpt-2.gguf", 50257, "!", "gpt2", true),
        (
            "ggml-vocab-starcoder.gguf",
            49152,
            "<|endoftext|>",
            "gpt2",
            true,
        ),
    ];
    for (name, n, first, model, merges) in cases {
        let (f, _) = open_both(&format!("vocab/{name}"));
        let md = f.metadata();
        assert_eq!(f.version(), 3);
        assert!(f.tensors().is_empty());
        let toks = md.get_str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!((toks.len(), toks[0].as_str()), (n, first), "{name}");
        assert_eq!(md.get_str("tokenizer.ggml.model").unwrap(), model);
        assert_eq!(
            md.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
            n
        );
        assert_eq!(md.contains("tokenizer.ggml.merges"), merges, "{name}");
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.data_offset() % 32, 0);
    }
    let (spm, _) = open_both("vocab/ggml-vocab-llama-spm.gguf");
    let md = spm.metadata();
    assert_eq!(md.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 1);
    assert_eq!(md.get_i64("tokenizer.ggml.eos_token_id").unwrap(), 2);
    assert!(md.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(
        md.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
        32000
    );
    assert_eq!(md.get_u32("llama.vocab_size").unwrap(), 32000);
}

#[test]
fn golden_i2_s_model() {
    let (f, _) = open_both("golden/gguf/bitnet-tiny-i2_s.gguf");
    let md = f.metadata();
    assert_eq!(md.architecture().unwrap(), "bitnet-25");
    assert_eq!(f.flavour(), Flavour::BitnetCpp);
    assert_eq!(md.get_u32("bitnet-25.embedding_length").unwrap(), 256);
    assert_eq!(md.get_u32("bitnet-25.block_count").unwrap(), 4);
    assert_eq!(md.get_f32("bitnet-25.rope.freq_base").unwrap(), 500000.0);
    assert_eq!(f.tensors().len(), 46);
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.ty, q.dims.as_slice(), q.n_bytes),
        (TensorType::I2_S, &[256u64, 256][..], 16416)
    );
    let k = f.tensor("blk.0.attn_k.weight").unwrap();
    assert_eq!((k.row_len(), k.rows()), (256, 128));
    // Every ternary matrix: codes are 0, 1 or 2 and the scale is positive and finite.
    let mut n_i2s = 0;
    for t in f.tensors().iter().filter(|t| t.ty == TensorType::I2_S) {
        n_i2s += 1;
        let (codes, scale) = i2s_scale(f.tensor_data(t), t.n_elements).unwrap();
        assert!(
            scale.is_finite() && scale > 0.0,
            "{}: scale {scale}",
            t.name
        );
        assert!(
            codes
                .iter()
                .all(|b| (0..4).all(|s| (b >> (2 * s)) & 3 != 3)),
            "{}",
            t.name
        );
    }
    assert_eq!(n_i2s, 28);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!((emb.ty, emb.n_bytes), (TensorType::F16, 256 * 32000 * 2));
}

#[test]
fn golden_upstream_models() {
    for (file, ty, bytes_q) in [
        ("upstream-tiny-tq1_0.gguf", TensorType::TQ1_0, 13824),
        ("upstream-tiny-tq2_0.gguf", TensorType::TQ2_0, 16896),
    ] {
        let (f, _) = open_both(&format!("golden/gguf/{file}"));
        assert_eq!(f.metadata().architecture().unwrap(), "bitnet");
        assert_eq!(f.tensors().len(), 46);
        let q = f.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!((q.ty, q.n_bytes), (ty, bytes_q));
        assert_eq!(
            f.tensor_bytes("blk.0.attn_q.weight").unwrap().len() as u64,
            q.n_bytes
        );
        let norm = f.tensor_bytes("output_norm.weight").unwrap();
        assert_eq!(norm.len(), 1024);
        assert!(matches!(
            f.tensor_bytes("nope"),
            Err(bitnet_gguf::GgufError::TensorNotFound { name }) if name == "nope"
        ));
        // The data section is aligned and tensor views start on aligned addresses in the
        // owned buffer.
        assert_eq!(f.data_offset() % f.alignment(), 0);
        for t in f.tensors() {
            assert_eq!(t.offset % f.alignment(), 0);
            assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        }
    }
}
