//! The BitNet embedding architectures from the command line: `gen-model` writes both tiny
//! shapes in bitnet.cpp's layout, `bitnet embed` reads their pooling from the file and gives
//! unit vectors of the model's width that agree across kernel sets, and `bitnet bench
//! --embeddings` measures them (inputs/s, tokens/s, the ratio against the first model). The
//! values are checked against the f32 reference in bitnet-core's `tests/embedding_models.rs`.

mod common;

use std::path::PathBuf;

use common::{bitnet, run_err, run_ok, stderr_of, stdout_of, tmp_dir};
use serde_json::Value;

fn model(preset: &str, extra: &[&str]) -> PathBuf {
    let path = tmp_dir().join(format!("{preset}{}.gguf", extra.join("")));
    run_ok(
        bitnet()
            .args(["gen-model", "--preset", preset, "--seed", "2", "-o"])
            .arg(&path)
            .args(extra),
    );
    path
}

fn embed(path: &PathBuf, kernel: &str) -> (Vec<Vec<f32>>, String) {
    let out = run_ok(bitnet().arg("embed").arg("-m").arg(path).args([
        "--kernel",
        kernel,
        "-p",
        "query: what is a ternary weight?",
        "-p",
        "a weight in {-1, 0, 1}",
    ]));
    let v: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let vs = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    (vs, stderr_of(&out))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let d: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let n = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    d / (n(a) * n(b))
}

#[test]
fn both_shapes_embed_alike_on_every_kernel_set() {
    let kernels = bitnet_kernels::Isa::available();
    for preset in ["tiny-qwen3-embed", "tiny-gemma3-embed"] {
        let path = model(preset, &[]);
        let (base, note) = embed(&path, "scalar");
        assert_eq!(base.len(), 2);
        assert!(base.iter().all(|v| v.len() == 256), "{preset}: width");
        for v in &base {
            let n: f64 = v.iter().map(|&x| f64::from(x).powi(2)).sum();
            assert!((n - 1.0).abs() < 1e-4, "{preset}: squared norm {n}");
        }
        assert!(note.contains("last pooling"), "{preset}: {note}");
        assert!(!note.contains("names no pooling_type"), "{preset}: {note}");
        assert!(
            cosine(&base[0], &base[1]) < 0.999,
            "{preset}: inputs differ"
        );
        for isa in &kernels {
            let (vs, _) = embed(&path, &isa.to_string());
            for (a, b) in vs.iter().zip(&base) {
                let c = cosine(a, b);
                assert!(c >= 0.999, "{preset} {isa}: cosine {c} against scalar");
            }
        }
    }
}

#[test]
fn bench_measures_embeddings_against_the_first_model() {
    let i2s = model("tiny-gemma3-embed", &[]);
    let teacher = model(
        "tiny-gemma3-embed",
        &["--weight-type", "f16", "--no-proj-norms"],
    );
    let out = run_ok(
        bitnet()
            .arg("bench")
            .arg("--embeddings")
            .arg("-m")
            .arg(&teacher)
            .arg("-m")
            .arg(&i2s)
            .args([
                "-p", "8,16", "-b", "1,3", "-r", "1", "--warmup", "0", "-t", "1",
            ]),
    );
    let table = stdout_of(&out);
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(".gguf")).collect();
    assert_eq!(rows.len(), 8, "{table}");
    // The first model's rows are the baseline; every row has a positive rate.
    for r in &rows {
        let cells: Vec<&str> = r.split('|').map(str::trim).collect();
        let ratio = cells[8].trim_end_matches('x').parse::<f64>().unwrap();
        let tokens = cells[7].parse::<f64>().unwrap();
        assert!(tokens > 0.0 && ratio > 0.0, "{r}");
        if r.contains(teacher.file_name().unwrap().to_str().unwrap()) {
            assert_eq!(ratio, 1.0, "{r}");
        }
    }
    let e = run_err(
        bitnet()
            .arg("bench")
            .arg("--embeddings")
            .arg("-m")
            .arg(&i2s)
            .args(["-p", "0"]),
    );
    assert!(e.contains("-p N > 0"), "{e}");
}

/// `generate` and `chat` run an embedding model's head if asked, but say first that its text
/// means nothing and which commands use the file; a language model gets no such line.
#[test]
fn generating_from_an_embedding_model_warns() {
    let path = model("tiny-qwen3-embed", &[]);
    let out = run_ok(
        bitnet()
            .args(["generate", "-p", "hi", "-n", "2", "-m"])
            .arg(&path),
    );
    let err = stderr_of(&out);
    assert!(
        err.contains("is an embedding model (qwen3.pooling_type 3, last)")
            && err.contains("bitnet embed"),
        "{err}"
    );
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/shakespeare.gguf");
    let out = run_ok(
        bitnet()
            .args(["generate", "-p", "hi", "-n", "2", "-m"])
            .arg(&shipped),
    );
    assert!(
        !stderr_of(&out).contains("embedding model"),
        "{}",
        stderr_of(&out)
    );
}
