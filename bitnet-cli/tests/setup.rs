//! The set-up a new user follows: the README's install and prerequisites (and the memory-mapping
//! page it links to), scripts that use every core, and a demo that runs the trained model the
//! repository ships. These read the repository's files, since the scripts themselves build in
//! release mode and take minutes.

use std::path::Path;

fn repo_file(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn readme_says_how_to_install_and_what_is_needed() {
    let readme = repo_file("README.md");
    for needle in [
        "cargo install --locked --path bitnet-cli",
        "target/release/bitnet",
        "rustfmt",
        "clippy",
        "`cc`",
        "scripts/setup-arm.sh",
        "gcc-aarch64-linux-gnu",
        "qemu-user",
        "xcode-select --install",
    ] {
        assert!(readme.contains(needle), "README lacks {needle:?}");
    }
    // What `--no-mmap` costs and buys is told where every command's flags are.
    let commands = repo_file("docs/commands.md");
    let needle = "`--no-mmap` keeps nothing mapped";
    assert!(
        commands.contains(needle),
        "docs/commands.md lacks {needle:?}"
    );
    assert!(
        readme.contains("docs/commands.md"),
        "the README links the commands page"
    );
    assert!(
        !readme.contains("a C compiler only for"),
        "the linker is always needed, not only for fuzzing"
    );
}

#[test]
fn scripts_build_with_every_core() {
    for script in [
        ".ci/run",
        "scripts/test.sh",
        "scripts/test-arm.sh",
        "scripts/demo.sh",
        "scripts/bench-record.sh",
        "scripts/perf.sh",
    ] {
        let text = repo_file(script);
        assert!(!text.contains("-j2"), "{script} has a fixed -j2");
        if text.contains("cargo ") {
            assert!(text.contains("nproc"), "{script} does not use nproc");
        }
    }
}

#[test]
fn demo_runs_the_shipped_trained_model() {
    let demo = repo_file("scripts/demo.sh");
    assert!(
        demo.contains("models/shakespeare.gguf"),
        "the demo runs the model the repo ships, not random weights"
    );
    assert!(
        !demo.contains("gen-model"),
        "no random model in the main job"
    );
    let generate = demo.find("generate -m").expect("the demo generates");
    let perplexity = demo
        .find("perplexity -m")
        .expect("the demo measures perplexity");
    assert!(generate < perplexity);
    let chat = demo.find("chat -m").expect("the demo opens a chat");
    assert!(
        perplexity < chat,
        "the chat comes last (it takes the terminal)"
    );
    assert!(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models/shakespeare.gguf")
            .is_file(),
        "the shipped model is in the repository"
    );
}
