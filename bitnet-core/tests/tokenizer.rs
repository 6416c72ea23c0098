//! Tokenizer behaviour beyond llama.cpp's test strings: special tokens written in text, BOS
//! and EOS rules, end-of-generation ids, decoding and the streaming decoder, speed, and the
//! errors for broken metadata. Real vocabularies come from the test data (`testdata/vocab`);
//! the rest use small synthetic vocabularies.

use std::time::Instant;

use bitnet_core::tokenizer::{
    StreamDecoder, TokenType, Tokenizer, TokenizerError, TokenizerKind, VocabSpec,
};
use bitnet_gguf::{GgufFile, LoadMode, Metadata, Value};

fn load(name: &str) -> Tokenizer {
    let path = bitnet_testdata::path(&format!("vocab/ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path, LoadMode::Mmap).expect("open vocab gguf");
    Tokenizer::from_metadata(file.metadata()).expect("build tokenizer")
}

fn stream_all(tok: &Tokenizer, ids: &[u32]) -> (Vec<String>, String) {
    let mut dec = StreamDecoder::new(tok);
    let mut parts: Vec<String> = ids.iter().map(|&id| dec.push(id)).collect();
    parts.push(dec.finish());
    let joined = parts.concat();
    (parts, joined)
}

#[test]
fn tokenizer_is_shareable() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Tokenizer>();
}

#[test]
fn spm_special_tokens_and_bos_rules() {
    let tok = load("llama-spm");
    assert_eq!(tok.kind(), TokenizerKind::Spm);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.unk_id()),
        (Some(1), Some(2), Some(0))
    );
    assert!(tok.add_bos() && !tok.add_eos() && tok.add_space_prefix());
    assert_eq!(tok.n_vocab(), 32000);

    let plain = tok.encode("Hello world", false, false);
    assert_eq!(plain, vec![15043, 3186]);
    assert_eq!(tok.encode("Hello world", true, false), vec![1, 15043, 3186]);
    assert_eq!(tok.encode("", true, false), vec![1]);
    assert!(tok.encode("", false, false).is_empty());

    // `<s>` is recognised only with parse_special; text after a special token gets the space
    // prefix again (llama.cpp's is_prev_special rule).
    assert_eq!(tok.encode("<s>Hello", false, true), vec![1, 15043]);
    let literal = tok.encode("<s>Hello", false, false);
    assert!(!literal.contains(&1), "{literal:?}");
    assert_eq!(tok.decode(&literal), "<s>Hello");
    assert_eq!(
        tok.encode("Hi</s><s>Hi", false, true),
        [
            tok.encode("Hi", false, false),
            vec![2, 1],
            tok.encode("Hi", false, false)
        ]
        .concat()
    );

    assert!(tok.is_eog(2) && !tok.is_eog(1) && !tok.is_eog(15043));
    assert_eq!(tok.token_type(1), Some(TokenType::Control));
    assert_eq!(tok.token_type(3 + 0x41), Some(TokenType::Byte));
    assert_eq!(tok.token_to_piece(3 + 0x41), b"A");
    assert_eq!(tok.token_to_piece(15043), b" Hello");
    assert_eq!(tok.token_to_piece(1), b"");
    assert_eq!(tok.token_to_piece_special(1, true), b"<s>");
    assert_eq!(tok.token_to_piece(u32::MAX), b"");
    assert_eq!(tok.token_text(15043), Some("▁Hello"));
}

#[test]
fn spm_decode_strips_only_the_added_space() {
    let tok = load("llama-spm");
    for text in [
        "Hello world",
        " Hello world",
        "  two spaces",
        "tab\tand\nnewline",
    ] {
        let ids = tok.encode(text, true, false);
        assert_eq!(tok.decode(&ids), text, "{ids:?}");
        let (_, streamed) = stream_all(&tok, &ids);
        assert_eq!(streamed, text);
    }
    // Without BOS the stream keeps the space: it may continue earlier text.
    let ids = tok.encode("Hello", false, false);
    let (_, streamed) = stream_all(&tok, &ids);
    assert_eq!(streamed, " Hello");
}

#[test]
fn stream_holds_back_split_characters() {
    let tok = load("llama-spm");
    // The llama emoji has no token: it falls back to four byte tokens.
    let ids = tok.encode("a 🦙!", false, false);
    let bytes: Vec<u32> = "🦙".bytes().map(|b| 3 + u32::from(b)).collect();
    let at = ids
        .windows(4)
        .position(|w| w == bytes.as_slice())
        .expect("byte fallback tokens");
    let mut dec = StreamDecoder::new(&tok);
    let mut out = String::new();
    for (i, &id) in ids.iter().enumerate() {
        let s = dec.push(id);
        if (at..at + 3).contains(&i) {
            assert_eq!(s, "", "partial character emitted at {i}");
            assert!(dec.has_pending());
        }
        if i == at + 3 {
            assert_eq!(s, "🦙");
        }
        out.push_str(&s);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, " a 🦙!");

    // A truncated character is flushed as U+FFFD at the end, not lost or emitted early.
    let mut dec = StreamDecoder::new(&tok);
    assert_eq!(dec.push(bytes[0]), "");
    assert_eq!(dec.push(bytes[1]), "");
    assert_eq!(dec.finish(), "\u{FFFD}");
    // A byte that cannot start a character is replaced at once.
    let mut dec = StreamDecoder::new(&tok);
    assert_eq!(dec.push(3 + 0x9F), "\u{FFFD}");
    assert!(!dec.has_pending());
}

#[test]
fn stream_matches_decode_on_all_vocabs() {
    for name in ["llama-spm", "llama-bpe", "gpt-2", "starcoder"] {
        let tok = load(name);
        let inp = bitnet_testdata::path(&format!("vocab/ggml-vocab-{name}.gguf.inp"));
        let inp = std::fs::read_to_string(inp).unwrap();
        let mut checked = 0;
        for text in inp.split("\n__ggml_vocab_test__\n") {
            let ids = tok.encode(text, true, false);
            let (parts, streamed) = stream_all(&tok, &ids);
            assert_eq!(streamed, tok.decode(&ids), "{name}: {text:?}");
            if !text.is_empty() {
                assert_eq!(streamed, text, "{name}: {text:?}");
            }
            // Nothing but the final flush may carry a replacement character.
            for p in &parts[..parts.len() - 1] {
                assert!(!p.contains('\u{FFFD}'), "{name}: {text:?} -> {p:?}");
            }
            checked += 1;
        }
        assert!(checked > 30, "{name}");
    }
}

#[test]
fn llama3_special_tokens_and_eog() {
    let tok = load("llama-bpe");
    assert_eq!(tok.kind(), TokenizerKind::Bpe);
    assert_eq!(tok.pre_tokenizer_name(), "llama-bpe");
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(128000), Some(128009)));
    assert!(tok.add_bos() && !tok.add_eos() && !tok.add_space_prefix());
    let eot = tok.token_id("<|eot_id|>").unwrap();
    let end_text = tok.token_id("<|end_of_text|>").unwrap();
    assert_eq!(tok.eot_id(), Some(eot));
    assert!(tok.is_eog(eot) && tok.is_eog(end_text) && !tok.is_eog(128000));

    let hello = tok.encode("Hello", false, false);
    assert_eq!(hello, vec![9906]);
    assert_eq!(tok.encode("Hello", true, false), vec![128000, 9906]);
    let text = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    let ids = tok.encode(text, false, true);
    let hdr = tok.token_id("<|start_header_id|>").unwrap();
    assert_eq!(ids[..2], [128000, hdr]);
    assert_eq!(*ids.last().unwrap(), eot);
    // As plain text the markers are ordinary characters and round-trip.
    let literal = tok.encode(text, false, false);
    assert!(literal.iter().all(|&id| id < 128000), "{literal:?}");
    assert_eq!(tok.decode(&literal), text);
    // Control tokens render as nothing, or as their text when asked.
    assert_eq!(tok.decode(&ids), "user\n\nHi");
    let mut dec = StreamDecoder::new(&tok).with_special(true);
    let shown: String = ids.iter().map(|&id| dec.push(id)).collect();
    assert_eq!(shown, text);
}

#[test]
fn gpt2_and_starcoder_flags() {
    let gpt2 = load("gpt-2");
    assert_eq!(gpt2.pre_tokenizer_name(), "gpt-2");
    assert!(!gpt2.add_bos());
    assert_eq!(
        gpt2.encode("Hello", true, false),
        gpt2.encode("Hello", false, false)
    );
    assert!(gpt2.is_eog(50256));
    assert_eq!(gpt2.encode("<|endoftext|>", false, true), vec![50256]);
    assert_ne!(gpt2.encode("<|endoftext|>", false, false), vec![50256]);

    let sc = load("starcoder");
    // StarCoder splits every digit.
    let ids = sc.encode("12345", false, false);
    assert_eq!(ids.len(), 5);
    assert_eq!(sc.decode(&ids), "12345");
    // `<fim_pad>` ends generation in llama.cpp.
    assert!(sc.is_eog(sc.token_id("<fim_pad>").unwrap()));
}

/// Tokenizing 100 KB must take well under a second in release builds.
#[test]
fn speed_100kb() {
    let all = std::fs::read_to_string(bitnet_testdata::path("text/tinyshakespeare.txt")).unwrap();
    let mut end = 100_000.min(all.len());
    while !all.is_char_boundary(end) {
        end -= 1;
    }
    let text = &all[..end];
    for name in ["llama-bpe", "llama-spm", "gpt-2"] {
        let t = Instant::now();
        let tok = load(name);
        eprintln!(
            "{name}: loaded in {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        let t = Instant::now();
        let ids = tok.encode(text, false, false);
        let dt = t.elapsed();
        eprintln!(
            "{name}: {} bytes -> {} tokens in {:.1} ms",
            text.len(),
            ids.len(),
            dt.as_secs_f64() * 1e3
        );
        assert!(ids.len() > text.len() / 8);
        assert_eq!(tok.decode(&ids), text);
        if !cfg!(debug_assertions) {
            assert!(dt.as_secs_f64() < 0.5, "{name}: {dt:?}");
        }
    }
}

// ---- synthetic vocabularies ----

/// A byte-level BPE vocabulary: the 256 byte characters, a few merges, specials.
fn toy_bpe() -> VocabSpec {
    let table = byte_chars();
    let mut tokens: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    let mut merges = Vec::new();
    for (a, b) in [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
    ] {
        merges.push(format!("{a} {b}"));
        tokens.push(format!("{a}{b}"));
    }
    tokens.push("<|eot_id|>".into());
    tokens.push("<tool>".into());
    let mut types = vec![1i64; tokens.len()];
    types[tokens.len() - 2] = 3;
    types[tokens.len() - 1] = 4;
    VocabSpec {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        token_types: Some(types),
        tokens,
        merges: Some(merges),
        bos_id: Some(0),
        ..VocabSpec::default()
    }
}

/// GPT-2's byte-to-character table, written out independently of the library.
fn byte_chars() -> Vec<char> {
    let mut n = 0;
    (0u32..256)
        .map(|b| {
            if (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b)
            {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            }
        })
        .collect()
}

#[test]
fn bpe_merges_user_defined_and_control() {
    let tok = Tokenizer::from_spec(toy_bpe()).unwrap();
    let id = |t: &str| tok.token_id(t).unwrap();
    assert_eq!(tok.encode("hello", false, false), vec![id("hello")]);
    assert_eq!(
        tok.encode("hello world", false, false)[..2],
        [id("hello"), id("Ġw")]
    );
    // User-defined tokens are cut out even without parse_special; control ones are not.
    assert_eq!(
        tok.encode("hello<tool>hello", false, false),
        vec![id("hello"), id("<tool>"), id("hello")]
    );
    let eot = id("<|eot_id|>");
    assert!(!tok.encode("<|eot_id|>", false, false).contains(&eot));
    assert_eq!(tok.encode("<|eot_id|>", false, true), vec![eot]);
    assert_eq!(tok.eot_id(), Some(eot));
    assert!(tok.is_eog(eot));
    // Pieces map GPT-2 characters back to bytes.
    assert_eq!(tok.token_to_piece(id("Ġw")), b" w");
    assert_eq!(tok.token_to_piece(id("<tool>")), b"<tool>");
    assert_eq!(tok.token_to_piece(eot), b"");
    assert_eq!(tok.decode(&tok.encode("héllo\n", false, false)), "héllo\n");
}

#[test]
fn unknown_pre_tokenizer_is_an_error() {
    let mut spec = toy_bpe();
    spec.pre = Some("no-such-pre".into());
    let err = Tokenizer::from_spec(spec).unwrap_err();
    assert!(matches!(err, TokenizerError::UnknownPreTokenizer(ref n) if n == "no-such-pre"));
    assert!(err.to_string().contains("tokenizer.ggml.pre"));
    // Absent means llama.cpp's `default` pre-tokenizer.
    let mut spec = toy_bpe();
    spec.pre = None;
    assert_eq!(
        Tokenizer::from_spec(spec).unwrap().pre_tokenizer_name(),
        "default"
    );
    for name in ["falcon3", "falcon", "default", "starcoder", "qwen2", "dbrx"] {
        let mut spec = toy_bpe();
        spec.pre = Some(name.into());
        let tok = Tokenizer::from_spec(spec).unwrap();
        let text = "Hello, y'all! 12345 {x} $5 ~";
        assert_eq!(tok.decode(&tok.encode(text, false, false)), text, "{name}");
    }
}

/// GGUF metadata for a tiny SPM vocabulary, to be broken key by key.
fn spm_metadata() -> Metadata {
    let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let n = tokens.len();
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", "llama");
    md.insert("tokenizer.ggml.tokens", tokens);
    md.insert(
        "tokenizer.ggml.scores",
        (0..n).map(|i| -(i as f32)).collect::<Vec<f32>>(),
    );
    let mut types = vec![1i32; n];
    types[0] = 2;
    types[1] = 3;
    types[2] = 3;
    md.insert("tokenizer.ggml.token_type", types);
    md.insert("tokenizer.ggml.bos_token_id", 1u32);
    md.insert("tokenizer.ggml.eos_token_id", 2u32);
    md
}

fn expect_key_error(md: &Metadata, key: &str) {
    let err = Tokenizer::from_metadata(md).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(key), "error {msg:?} does not name {key}");
    match err {
        TokenizerError::MissingKey { key: k } | TokenizerError::InvalidKey { key: k, .. } => {
            assert_eq!(k, key)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn spm_synthetic_merges_by_score() {
    let tok = Tokenizer::from_metadata(&spm_metadata()).unwrap();
    // "▁ab": candidates "▁a" (score -6) and "ab" (-7): "▁a" wins, then "▁ab" (-8) joins.
    assert_eq!(tok.encode("ab", false, false), vec![8]);
    assert_eq!(tok.encode("ab", true, false), vec![1, 8]);
    // 'c' is not in the vocabulary and there are no byte tokens: it becomes <unk>.
    assert_eq!(tok.encode("c", false, false), vec![3, 0]);
    assert_eq!(tok.decode(&[1, 8]), "ab");
}

#[test]
fn broken_metadata_names_the_key() {
    let mut md = spm_metadata();
    md.remove("tokenizer.ggml.tokens");
    expect_key_error(&md, "tokenizer.ggml.tokens");

    let mut md = spm_metadata();
    md.remove("tokenizer.ggml.model");
    expect_key_error(&md, "tokenizer.ggml.model");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.tokens", 5u32);
    expect_key_error(&md, "tokenizer.ggml.tokens");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.scores", vec![0.0f32; 3]);
    expect_key_error(&md, "tokenizer.ggml.scores");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.token_type", vec![1i32; 20]);
    expect_key_error(&md, "tokenizer.ggml.token_type");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.bos_token_id", 9u32);
    expect_key_error(&md, "tokenizer.ggml.bos_token_id");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.eos_token_id", Value::String("two".into()));
    expect_key_error(&md, "tokenizer.ggml.eos_token_id");

    let mut md = spm_metadata();
    md.insert(
        "tokenizer.ggml.tokens",
        vec!["a".to_string(), "a".to_string()],
    );
    md.remove("tokenizer.ggml.scores");
    md.remove("tokenizer.ggml.token_type");
    md.remove("tokenizer.ggml.bos_token_id");
    md.remove("tokenizer.ggml.eos_token_id");
    expect_key_error(&md, "tokenizer.ggml.tokens");

    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.model", "t5");
    assert!(matches!(
        Tokenizer::from_metadata(&md),
        Err(TokenizerError::UnsupportedModel(ref m)) if m == "t5"
    ));

    // BPE: merges missing, malformed, or joining something that is not a token.
    let mut md = spm_metadata();
    md.insert("tokenizer.ggml.model", "gpt2");
    md.insert("tokenizer.ggml.pre", "gpt-2");
    expect_key_error(&md, "tokenizer.ggml.merges");
    for bad in ["a zz", "▁ b", "ab"] {
        let mut md = md.clone();
        md.insert("tokenizer.ggml.merges", vec![bad.to_string()]);
        expect_key_error(&md, "tokenizer.ggml.merges");
    }
    let mut ok = md.clone();
    ok.insert(
        "tokenizer.ggml.merges",
        vec!["▁ a".to_string(), "a b".to_string()],
    );
    assert!(Tokenizer::from_metadata(&ok).is_ok());

    // add_bos without a BOS id.
    let mut spec = toy_bpe();
    spec.bos_id = None;
    spec.add_bos = Some(true);
    let err = Tokenizer::from_spec(spec).unwrap_err();
    assert!(
        err.to_string().contains("tokenizer.ggml.add_bos_token"),
        "{err}"
    );
}

/// The golden prompt of `testdata/golden`: bitnet.cpp and llama.cpp both tokenized it
/// (BOS first) from the vocabulary inside their model files; we must give the same ids and
/// pieces from the same metadata.
#[test]
fn golden_prompt_matches_both_engines() {
    let dir = bitnet_testdata::path("golden");
    for (json, gguf) in [
        ("bitnet-tiny-i2_s.json", "bitnet-tiny-i2_s.gguf"),
        ("upstream-tiny-tq1_0.json", "upstream-tiny-tq1_0.gguf"),
    ] {
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(json)).unwrap()).unwrap();
        let file = GgufFile::open(dir.join("gguf").join(gguf), LoadMode::Mmap).unwrap();
        let tok = Tokenizer::from_metadata(file.metadata()).unwrap();
        let prompt = golden["prompt"].as_str().unwrap();
        let want: Vec<u32> = golden["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(want.len(), 42);
        assert_eq!(tok.encode(prompt, true, false), want, "{json}");
        let pieces: Vec<String> = want
            .iter()
            .map(|&id| String::from_utf8_lossy(tok.token_to_piece_special(id, true)).into_owned())
            .collect();
        let want_pieces: Vec<&str> = golden["token_pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(pieces, want_pieces, "{json}");
        assert_eq!(tok.decode(&want), prompt);
    }
}

/// Large merge tables are resolved in parallel; a bad merge must still be reported by its
/// rank, the lowest one first.
#[test]
fn bad_merge_in_large_table_reports_lowest_rank() {
    let path = bitnet_testdata::path("vocab/ggml-vocab-gpt-2.gguf");
    let file = GgufFile::open(path, LoadMode::Mmap).unwrap();
    let mut md = file.metadata().clone();
    let mut merges = md.get_str_array("tokenizer.ggml.merges").unwrap().to_vec();
    assert!(merges.len() > 40_000);
    merges[45_000] = "nosuch token".into();
    merges[20_123] = "zzzq xxxq".into();
    md.insert("tokenizer.ggml.merges", merges);
    let err = Tokenizer::from_metadata(&md).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer.ggml.merges") && err.contains("#20123"),
        "{err}"
    );
}
