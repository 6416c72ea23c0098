//! The model the repository ships (`models/shakespeare.gguf`, trained by `tools/train` and
//! converted by `bitnet-convert`) against the trainer's own figures: its logits on the
//! reference prompt, its greedy text, and its perplexity on the held-out text (same ternary
//! math, so within 1%); and the perplexity tool's KL-divergence mode.

mod common;

use std::path::PathBuf;

use common::{bitnet, run_err, run_ok, scratch, stdout_of};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(repo("models/shakespeare-ref/reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn f32s(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

#[test]
fn the_shipped_model_gives_the_trainers_logits_and_text() {
    let r = reference();
    let tokens: Vec<String> = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap().to_string())
        .collect();
    let out = scratch("shipped").join("logits.f32");
    run_ok(
        bitnet()
            .args(["logits", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["--tokens", &tokens.join(","), "-t", "2", "-o"])
            .arg(&out),
    );
    let ours = f32s(&out);
    let theirs = f32s(&repo("models/shakespeare-ref/logits.f32"));
    assert_eq!(ours.len(), theirs.len());
    let v = r["n_vocab"].as_u64().unwrap() as usize;
    let num: f64 = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum();
    let den: f64 = theirs.iter().map(|b| f64::from(*b).powi(2)).sum();
    let dot: f64 = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let na: f64 = ours.iter().map(|a| f64::from(*a).powi(2)).sum();
    let (rel, cos) = ((num / den).sqrt(), dot / (na.sqrt() * den.sqrt()));
    let rows = ours.len() / v;
    let same = (0..rows)
        .filter(|&i| argmax(&ours[i * v..][..v]) == argmax(&theirs[i * v..][..v]))
        .count();
    // The golden tolerances (testdata/README.md).
    assert!(rel <= 0.07, "rel-L2 {rel}");
    assert!(cos >= 0.998, "cosine {cos}");
    assert!(same * 42 >= rows * 35, "top-1 {same}/{rows}");

    // Greedy text: the trainer's continuation of the same prompt.
    let prompt = r["prompt"].as_str().unwrap();
    let want = r["greedy_text"].as_str().unwrap();
    let generated = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["-p", prompt, "--greedy", "-n", "64", "--no-echo", "-t", "2"]),
    );
    let got = stdout_of(&generated);
    // Compare the first line breaks' worth: greedy text agrees until the first near-tie.
    let head: String = want.chars().take(40).collect();
    assert!(got.starts_with(&head), "got {got:?}, trainer {want:?}");
}

#[test]
fn perplexity_matches_the_trainer_within_one_percent() {
    let r = reference();
    let out = run_ok(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(repo("models/shakespeare-ref/heldout.txt"))
            .args(["-c", "256", "-t", "2"]),
    );
    let text = stdout_of(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no final line in {text}"));
    let ppl: f64 = line["Final estimate: PPL = ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let want = r["heldout_ppl"].as_f64().unwrap();
    assert!(
        (ppl - want).abs() / want < 0.01,
        "engine {ppl} vs trainer {want}"
    );
    let scored = r["heldout_scored_tokens"].as_u64().unwrap();
    assert!(line.contains(&format!("({scored} tokens scored")), "{line}");
    assert!(ppl < r["unigram_ppl"].as_f64().unwrap() / 5.0);
}

#[test]
fn kl_divergence_is_zero_against_itself_and_measures_a_change() {
    let dir = scratch("kld");
    let base = dir.join("base.kld");
    let run = |extra: &[&str]| {
        stdout_of(&run_ok(
            bitnet()
                .args(["perplexity", "-m"])
                .arg(repo("models/shakespeare.gguf"))
                .arg("-f")
                .arg(repo("models/shakespeare-ref/heldout.txt"))
                .args([
                    "-c",
                    "128",
                    "--chunks",
                    "6",
                    "-t",
                    "1",
                    "--kl-divergence-base",
                ])
                .arg(&base)
                .args(extra),
        ))
    };
    let kld_of = |text: &str| -> (f64, f64) {
        let line = text.lines().find(|l| l.starts_with("Mean KLD: ")).unwrap();
        let kld: f64 = line["Mean KLD: ".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let pct = line.split("same top token: ").nth(1).unwrap();
        let pct: f64 = pct.split('%').next().unwrap().parse().unwrap();
        (kld, pct)
    };
    run(&[]);
    assert!(base.is_file());
    let (same_kld, same_top) = kld_of(&run(&["--kl-divergence"]));
    assert!(same_kld < 1e-6, "{same_kld}");
    assert_eq!(same_top, 100.0);
    // An 8-bit head moves the distribution a little, not a lot.
    let (q8_kld, q8_top) = kld_of(&run(&["--kl-divergence", "--head", "q8"]));
    assert!(q8_kld > 0.0 && q8_kld < 0.05, "{q8_kld}");
    assert!(q8_top > 90.0, "{q8_top}");
    // Top-k storage gives nearly the same figure.
    run(&["--kl-top-k", "32"]);
    let (topk_kld, _) = kld_of(&run(&["--kl-divergence", "--head", "q8"]));
    assert!(
        (topk_kld - q8_kld).abs() <= 0.2 * q8_kld + 1e-4,
        "{topk_kld} vs {q8_kld}"
    );
}

#[test]
fn perplexity_refuses_what_it_cannot_score() {
    let dir = scratch("ppl-bad");
    let short = dir.join("short.txt");
    std::fs::write(&short, "ROMEO: hi").unwrap();
    let ppl = |extra: &[&str]| {
        common::run_err(
            bitnet()
                .args(["perplexity", "-m"])
                .arg(repo("models/shakespeare.gguf"))
                .args(["-t", "1"])
                .args(extra),
        )
    };
    let err = ppl(&["-f", short.to_str().unwrap(), "-c", "256"]);
    assert!(err.contains("fewer than one window"), "{err}");
    let heldout = repo("models/shakespeare-ref/heldout.txt");
    let heldout = heldout.to_str().unwrap();
    let err = ppl(&["-f", heldout, "-c", "2"]);
    assert!(err.contains("at least 4 tokens"), "{err}");
    // A KL base that is not one, or was saved with another context, is named as such.
    let err = ppl(&[
        "-f",
        heldout,
        "--kl-divergence-base",
        short.to_str().unwrap(),
        "--kl-divergence",
    ]);
    assert!(err.contains("is not a KL-divergence base file"), "{err}");
    // So is an empty file (it read as "failed to fill whole buffer").
    let empty = dir.join("empty.kld");
    std::fs::write(&empty, "").unwrap();
    let err = ppl(&[
        "-f",
        heldout,
        "--kl-divergence-base",
        empty.to_str().unwrap(),
        "--kl-divergence",
    ]);
    assert!(err.contains("is not a KL-divergence base file"), "{err}");
    let base = dir.join("base.kld");
    let b = base.to_str().unwrap();
    run_ok(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args([
                "-f",
                heldout,
                "-c",
                "64",
                "--chunks",
                "2",
                "-t",
                "1",
                "--kl-divergence-base",
                b,
            ]),
    );
    let err = ppl(&[
        "-f",
        heldout,
        "-c",
        "128",
        "--chunks",
        "2",
        "--kl-divergence-base",
        b,
        "--kl-divergence",
    ]);
    assert!(err.contains("was saved with"), "{err}");
}

/// StreamingLLM's window: a text many times the window read as one stream in a constant
/// number of blocks, with a perplexity near the chunked one (the same model, the same
/// text), every block back in the pool at the end (the command checks and fails if not).
#[test]
fn perplexity_through_a_sliding_window_stays_bounded() {
    // The first 12 KB of the held-out text: about 5,000 tokens, 40 windows of 124.
    let text = std::fs::read_to_string(repo("models/shakespeare-ref/heldout.txt")).unwrap();
    let dir = scratch("ppl-window");
    let part = dir.join("part.txt");
    std::fs::write(&part, &text[..12_000]).unwrap();
    let ppl_of = |out: &std::process::Output| -> f64 {
        let s = stdout_of(out);
        let line = s
            .lines()
            .find(|l| l.starts_with("Final estimate: PPL = "))
            .unwrap();
        line["Final estimate: PPL = ".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let chunked = run_ok(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(&part)
            .args(["-c", "128", "-t", "1"]),
    );
    let windowed = run_ok(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(&part)
            .args(["--kv-window", "124", "--kv-sinks", "4", "-t", "1"]),
    );
    let (c, w) = (ppl_of(&chunked), ppl_of(&windowed));
    assert!(
        w.is_finite() && (w - c).abs() / c < 0.15,
        "windowed {w} vs chunked {c}"
    );
    let err = common::stderr_of(&windowed);
    assert!(err.contains("at most 8 of 8 blocks held"), "{err}");
    let moves: usize = err
        .split(" moves")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(moves > 100, "{moves} moves");
    // H2O at the same total positions: the same tokens scored, the same blocks.
    let h2o = run_ok(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(&part)
            .args(["--kv-evict", "h2o", "--kv-budget", "128", "-t", "1"]),
    );
    let h = ppl_of(&h2o);
    assert!(
        h.is_finite() && (h - c).abs() / c < 0.25,
        "h2o {h} vs chunked {c}"
    );
    let err = common::stderr_of(&h2o);
    assert!(err.contains("at most 8 of 8 blocks held"), "{err}");
    let scored = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .split(" tokens scored")
            .next()
            .and_then(|s| s.rsplit('(').next())
            .map(str::to_owned)
    };
    assert_eq!(scored(&h2o), scored(&windowed), "the same tokens scored");
    let e = run_err(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(&part)
            .args([
                "--kv-evict",
                "h2o",
                "--kv-budget",
                "64",
                "--kv-recent",
                "58",
            ]),
    );
    assert!(e.contains("heavy"), "{e}");
    // Too small a window, and a text shorter than the window, are refused.
    let e = run_err(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .arg("-f")
            .arg(&part)
            .args(["--kv-window", "8"]),
    );
    assert!(e.contains("--kv-window 8"), "{e}");
}

#[test]
fn generate_goes_past_the_context_with_a_window_or_a_shift() {
    let model = repo("models/shakespeare.gguf");
    let long_prompt = "ROMEO: But soft, what light through yonder window breaks? ".repeat(20);
    let generate = |extra: &[&str]| {
        let mut cmd = bitnet();
        cmd.args(["generate", "-m"])
            .arg(&model)
            .args(["-s", "3", "-t", "1", "-c", "128", "--no-echo", "-v"])
            .args(extra);
        cmd
    };
    // Without a policy: a prompt past -c is refused, generation stops at the context.
    let e = run_err(&mut generate(&["-p", &long_prompt, "-n", "8"]));
    assert!(e.contains("context"), "{e}");
    let stop = run_ok(&mut generate(&[
        "-p",
        "ROMEO:",
        "-n",
        "400",
        "--ignore-eos",
    ]));
    let err = common::stderr_of(&stop);
    assert!(err.contains("stop: context full"), "{err}");
    for (flags, front) in [
        (&["--kv-window", "64"][..], "window"),
        (&["--context-shift", "--keep", "2"][..], "shift"),
        (&["--kv-evict", "h2o", "--kv-budget", "64"][..], "h2o"),
    ] {
        let mut args = vec!["-p", long_prompt.as_str(), "-n", "400", "--ignore-eos"];
        args.extend_from_slice(flags);
        let out = run_ok(&mut generate(&args));
        let err = common::stderr_of(&out);
        assert!(
            err.contains("generated 400 tok") && err.contains("stop: max tokens"),
            "{front}: {err}"
        );
        let removed: usize = err
            .split(" positions removed")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{front}: {err}"));
        assert!(removed > 400, "{front}: {removed} removed");
        assert!(
            err.contains("KV blocks in use 0 before, 0 after"),
            "{front}: every block back: {err}"
        );
    }
    // Flags that cannot work are refused by name.
    let e = run_err(&mut generate(&["-p", "ROMEO:", "--kv-window", "500"]));
    assert!(e.contains("window"), "{e}");
    let e = run_err(&mut generate(&["-p", "ROMEO:", "--keep", "3"]));
    assert!(e.contains("--context-shift"), "{e}");
    let e = run_err(&mut generate(&[
        "-p",
        "ROMEO:",
        "--kv-evict",
        "h2o",
        "--kv-budget",
        "500",
    ]));
    assert!(e.contains("budget"), "{e}");
}
