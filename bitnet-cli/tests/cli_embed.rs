//! `bitnet embed`: OpenAI's embeddings response from -p and -f inputs on the shipped model,
//! unit vectors that the raw format gives bit for bit, each pooling and precision, and clear
//! errors for empty, missing and over-long inputs and impossible output requests. The values
//! themselves are checked against the f32 reference in bitnet-core's `tests/embeddings.rs`.

mod common;

use common::{bitnet, run_err, run_ok, shipped_model, stdout_of, tmp_dir};
use serde_json::Value;

fn embed_json(args: &[&str]) -> Value {
    let out = run_ok(
        bitnet()
            .arg("embed")
            .arg("-m")
            .arg(shipped_model())
            .args(args),
    );
    serde_json::from_str(&stdout_of(&out)).expect("a JSON response")
}

fn vectors(v: &Value) -> Vec<Vec<f32>> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

#[test]
fn texts_and_a_file_give_unit_vectors_in_openais_shape() {
    let file = tmp_dir().join("embed-inputs.txt");
    std::fs::write(
        &file,
        "But soft, what light\r\nthrough yonder window breaks\n",
    )
    .unwrap();
    let v = embed_json(&[
        "-p",
        "ROMEO:",
        "-p",
        "-JULIET-",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "shakespeare");
    let vs = vectors(&v);
    assert_eq!(vs.len(), 4);
    for x in &vs {
        assert_eq!(x.len(), 256);
        let n: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
        assert!((n - 1.0).abs() < 1e-4, "squared norm {n}");
    }
    assert_ne!(vs[0], vs[1]);
    let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens >= 4, "{tokens}");
    assert_eq!(v["usage"]["total_tokens"], tokens);

    // The same inputs one at a time give the same vectors; raw f32 gives their bits.
    let one = vectors(&embed_json(&["-p", "ROMEO:"]));
    assert_eq!(one[0], vs[0]);
    let raw = tmp_dir().join("embed.f32");
    run_ok(
        bitnet()
            .args(["embed", "-p", "ROMEO:", "--format", "raw", "-o"])
            .arg(&raw)
            .arg("-m")
            .arg(shipped_model()),
    );
    let bytes = std::fs::read(&raw).unwrap();
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(floats, one[0]);
}

#[test]
fn poolings_normalizations_and_precisions() {
    let each = vectors(&embed_json(&[
        "-p",
        "ROMEO:",
        "--pooling",
        "none",
        "--normalize",
        "-1",
    ]));
    assert!(each.len() >= 2, "one vector a token");
    let last = vectors(&embed_json(&[
        "-p",
        "ROMEO:",
        "--pooling",
        "last",
        "--normalize",
        "-1",
    ]));
    assert_eq!(&last[0], each.last().unwrap());
    let cls = vectors(&embed_json(&[
        "-p",
        "ROMEO:",
        "--pooling",
        "cls",
        "--normalize",
        "-1",
    ]));
    assert_eq!(cls[0], each[0]);
    let mean = vectors(&embed_json(&[
        "-p",
        "ROMEO:",
        "--pooling",
        "mean",
        "--normalize",
        "1",
    ]));
    let taxicab: f64 = mean[0].iter().map(|&a| f64::from(a).abs()).sum();
    assert!((taxicab - 1.0).abs() < 1e-4, "{taxicab}");

    let bin = embed_json(&["-p", "ROMEO:", "--output-precision", "ubinary"]);
    let bytes = bin["data"][0]["embedding"].as_array().unwrap();
    assert_eq!(bytes.len(), 256 / 8);
    // The top bit of the first byte is the sign of the first value.
    let first = vectors(&embed_json(&["-p", "ROMEO:"]))[0][0];
    assert_eq!(bytes[0].as_u64().unwrap() >= 128, first > 0.0);
    let i8s = embed_json(&[
        "-p",
        "a",
        "-p",
        "b",
        "-p",
        "c",
        "--output-precision",
        "int8",
    ]);
    for d in i8s["data"].as_array().unwrap() {
        for x in d["embedding"].as_array().unwrap() {
            assert!((-128..=127).contains(&x.as_i64().unwrap()));
        }
    }
}

#[test]
fn bad_requests_are_errors_that_say_why() {
    let m = shipped_model();
    let err = run_err(bitnet().args(["embed", "-m"]).arg(&m));
    assert!(err.contains("nothing to embed"), "{err}");
    let err = run_err(bitnet().args(["embed", "-p", ""]).arg("-m").arg(&m));
    assert!(err.contains("input 1 is empty"), "{err}");
    let file = tmp_dir().join("embed-blank.txt");
    std::fs::write(&file, "one\n\nthree\n").unwrap();
    let err = run_err(bitnet().args(["embed", "-f"]).arg(&file).arg("-m").arg(&m));
    assert!(err.contains("line 2") && err.contains("empty"), "{err}");
    let err = run_err(
        bitnet()
            .args(["embed", "-p", "x", "--format", "raw"])
            .arg("-m")
            .arg(&m),
    );
    assert!(err.contains("-o FILE"), "{err}");
    let err = run_err(
        bitnet()
            .args(["embed", "-p", "x", "--output-precision", "int8"])
            .arg("-m")
            .arg(&m),
    );
    assert!(err.contains("two inputs"), "{err}");
    let long = "ROMEO: ".repeat(40);
    let err = run_err(
        bitnet()
            .args(["embed", "-c", "16", "-p"])
            .arg(&long)
            .arg("-m")
            .arg(&m),
    );
    assert!(err.contains("over the context of 16"), "{err}");
}
