//! The README's "Run a real model" section, run on the shipped checkpoint
//! (`models/shakespeare-hf`, the file layout of microsoft/bitnet-b1.58-2B-4T): its convert
//! command as written, with the checkpoint path substituted, writes a GGUF that loads and
//! runs; its downloads fetch every file the converter reads, into the directory the convert
//! command reads; and the chat line opens the file the convert line writes. Also
//! `--outfile`, llama.cpp's name for `-o`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lines of the README's "Run a real model" section's shell blocks, continuations joined
/// and comments dropped.
fn section_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("\n## Run a real model")
        .expect("README.md has a \"Run a real model\" section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut line = String::new();
    for l in section.lines() {
        if l.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let l = l.split(" #").next().unwrap().trim_end();
        match l.strip_suffix('\\') {
            Some(head) => line.push_str(head),
            None => {
                line.push_str(l);
                commands.push(std::mem::take(&mut line).trim().to_owned());
            }
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The command in the section whose first word is `program`, as words.
fn command(commands: &[String], program: &str) -> Vec<String> {
    let words: Vec<Vec<String>> = commands
        .iter()
        .map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| w.first().is_some_and(|p| p == program))
        .collect();
    assert_eq!(words.len(), 1, "one `{program}` line: {commands:#?}");
    words.into_iter().next().unwrap()
}

fn value_of<'a>(words: &'a [String], flags: &[&str]) -> &'a str {
    let at = words
        .iter()
        .position(|w| flags.contains(&w.as_str()))
        .unwrap_or_else(|| panic!("{flags:?} in {words:?}"));
    &words[at + 1]
}

/// Runs `bitnet-convert` with `words` (the README's, program name first), reading `hf_dir`
/// and writing `out` in place of the README's paths.
fn convert(words: &[String], hf_dir: &Path, out: &Path) -> std::process::Output {
    let mut args: Vec<String> = words[1..].to_vec();
    let out_at = args
        .iter()
        .position(|w| w == "-o" || w == "--output" || w == "--outfile")
        .expect("the convert line names its output")
        + 1;
    args[out_at] = out.display().to_string();
    let dir_at = (0..args.len())
        .find(|&i| !args[i].starts_with('-') && (i == 0 || !args[i - 1].starts_with('-')))
        .expect("the convert line names the checkpoint");
    args[dir_at] = hf_dir.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_bitnet-convert"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bitnet-convert {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_readme_convert_command_writes_a_model_that_runs() {
    let commands = section_commands();
    let words = command(&commands, "bitnet-convert");
    let hf_dir = root().join("models/shakespeare-hf");
    let out = bitnet_test_scratch::fresh_dir("readme-convert").join("model.gguf");
    convert(&words, &hf_dir, &out);

    use bitnet_core::engine::{EngineOptions, Session};
    use bitnet_core::model::{LoadOptions, Model};
    let model = std::sync::Arc::new(Model::load(&out, &LoadOptions::default()).unwrap());
    let n_vocab = model.n_vocab();
    assert_eq!(n_vocab, 1024, "the checkpoint's vocabulary");
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        n_ctx: 16,
        ..EngineOptions::default()
    };
    let mut session = Session::new(model, &opts).unwrap();
    let logits = session.eval(&[0, 50, 60], true).unwrap().to_vec();
    assert_eq!(logits.len(), 3 * n_vocab);
    assert!(logits.iter().all(|x| x.is_finite()));

    // The chat line opens what the convert line writes.
    let chat = commands
        .iter()
        .find(|c| c.starts_with("bitnet chat "))
        .expect("a `bitnet chat` line");
    let chat: Vec<String> = chat.split_whitespace().map(str::to_owned).collect();
    assert_eq!(
        value_of(&chat, &["-m"]),
        value_of(&words, &["-o", "--output", "--outfile"])
    );
}

#[test]
fn the_readme_downloads_fetch_what_the_converter_reads_where_it_reads_it() {
    let commands = section_commands();
    let convert_words = command(&commands, "bitnet-convert");
    let dir = convert_words[1..]
        .iter()
        .find(|w| !w.starts_with('-'))
        .unwrap()
        .clone();
    // Every file the shipped checkpoint has (the 2B-4T layout) is one the converter may read;
    // the curl loop must fetch each of them, and nothing the checkpoint lacks.
    let mut wanted: Vec<String> = std::fs::read_dir(root().join("models/shakespeare-hf"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    wanted.sort();
    let curl = commands
        .iter()
        .find(|c| c.contains("curl "))
        .expect("a curl download");
    let list = curl
        .split("for f in ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .expect("a `for f in ...;` loop");
    let mut fetched: Vec<String> = list.split_whitespace().map(str::to_owned).collect();
    fetched.sort();
    assert_eq!(fetched, wanted);
    assert!(curl.contains(&format!("-o {dir}/$f")), "{curl}");
    assert!(
        curl.contains("https://huggingface.co/microsoft/bitnet-b1.58-2B-4T/resolve/main/$f"),
        "{curl}"
    );

    let hf = command(&commands, "hf");
    assert_eq!(value_of(&hf, &["--local-dir"]), dir);
    assert_eq!(hf[2], "microsoft/bitnet-b1.58-2B-4T");
    let git = commands
        .iter()
        .find(|c| c.contains("git clone "))
        .expect("a git clone download");
    let url = git.split("git clone ").nth(1).unwrap().trim();
    assert_eq!(url.rsplit('/').next(), Some(dir.as_str()), "{git}");
    assert!(git.contains("git lfs install"), "{git}");
}

#[test]
fn outfile_is_llama_cpp_s_name_for_the_output() {
    let hf_dir = root().join("models/shakespeare-hf");
    let dir = bitnet_test_scratch::fresh_dir("outfile");
    let words = |flag: &str| -> Vec<String> {
        ["bitnet-convert", "CHECKPOINT", flag, "OUT"]
            .map(str::to_owned)
            .to_vec()
    };
    convert(&words("--outfile"), &hf_dir, &dir.join("a.gguf"));
    convert(&words("-o"), &hf_dir, &dir.join("b.gguf"));
    let a = std::fs::read(dir.join("a.gguf")).unwrap();
    assert!(!a.is_empty());
    assert!(a == std::fs::read(dir.join("b.gguf")).unwrap());
    let help = Command::new(env!("CARGO_BIN_EXE_bitnet-convert"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--outfile"));
}
